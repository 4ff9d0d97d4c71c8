internal import CJPEG
internal import CVips
import Support

/// A still thumbnail's JPEG, encoded in the calling thread by libjpeg, with the settings
/// libvips's `jpegsave` uses (CJPEG's shim). libvips's jpegsave computes each strip on one of
/// its workers and hands it to the calling thread to compress, which waits for every one:
/// with 1200x800 thumbnails 8 at once on 2 cores, the cores were 88% busy (thumbor kept them
/// 97% busy on the same scene). Here the strips are computed and compressed in the resize's
/// own thread, at its priority, its control checked before each strip of 16 rows. sRGB of 8 bits without alpha only (`canEncodeHere`: a still thumbnail,
/// its source grey or not); the rest goes to libvips.
extension Thumbnailer {
    static func canEncodeHere(_ image: VipsImageHandle, _ format: ImageFormat, frames: Int) -> Bool {
        format == .jpeg && frames == 1 && thumbd_vips_rows_ready(image.raw) != 0
    }

    static func encodeJPEGHere(_ image: VipsImageHandle, quality: Int, progressive: Bool,
                               control: ResizeControl) throws(ThumbnailerError) -> Bytes {
        guard let rows = RowSource(image, control) else { throw .failed(takeError()) }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        var message = [CChar](repeating: 0, count: 200)
        let rc = message.withUnsafeMutableBufferPointer { text in
            thumbd_jpeg_encode(Int32(image.width), Int32(image.height), Int32(vips_image_get_bands(image.raw)),
                               Int32(quality), progressive ? 1 : 0, thumbd_vips_rows_fill, UnsafeMutableRawPointer(rows.raw),
                               &buffer, &length, text.baseAddress, text.count)
        }
        switch rc {
        case 0:
            guard let buffer else { throw .failed("libjpeg gave no bytes") }
            defer { thumbd_jpeg_free(buffer) }
            return Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
        case -1:
            throw control.failure(otherwise: .failed(takeError()))
        default:
            let reason = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw .failed(reason.isEmpty ? "libjpeg could not encode the image" : reason)
        }
    }
}

/// An image's rows computed in this thread for an encoder: owned here, freed in `deinit`.
private final class RowSource {
    let raw: UnsafeMutablePointer<thumbd_vips_rows>

    init?(_ image: VipsImageHandle, _ control: ResizeControl) {
        guard let raw = thumbd_vips_rows_new(image.raw, control.raw) else { return nil }
        self.raw = raw
    }

    deinit { thumbd_vips_rows_free(raw) }
}
