internal import CJPEG
internal import CVips
import Foundation
import Support

/// A still JPEG decoded by libjpeg itself, in the calling thread, into memory the resize then
/// reads. Two gains over libvips's loader:
/// - any eighth of the size: the loader shrinks by 1, 2, 4 or 8 only. A 2040×1356 photo
///   fitted into 512×512 was decoded at 1/2 (1020×678) and resized by 1.99; at 3/8
///   (765×509) the decode costs about the same and the resize sees 44% fewer pixels;
/// - none of the loader's own work: its header parsed again (EXIF through libexif), its
///   objects, its sequential line cache, its strips handed through regions. Counted under
///   callgrind, a 1200×800 thumbnail at 1/4 took 10% fewer instructions, a 4000×3000 one at
///   1/8 6.5% fewer.
/// The plan chooses the scale (`ThumbnailPlan.decodeEighths`); the steps after it are the
/// same (the resize applies the EXIF orientation kept on the image). The bytes are a whole
/// body, or a feed read as they arrive (libjpeg waits in its read when it has caught up, as
/// the loader does): the same decoder, so the same pixels.
extension Thumbnailer {
    enum JPEGInput {
        case body(Bytes)
        case feed(ByteFeed)
    }

    /// `input` decoded at `eighths`/8, or nil when libjpeg leaves it to the loader (CMYK).
    static func decodeJPEGHere(_ input: JPEGInput, eighths: Int, orientation: Int,
                               control: ResizeControl) throws(ThumbnailerError) -> VipsImageHandle? {
        var message = [CChar](repeating: 0, count: 200)
        let target: DecodeTarget
        let rc: Int32
        switch input {
        case .body(let body):
            target = DecodeTarget(control, feed: nil)
            let context = Unmanaged.passUnretained(target).toOpaque()
            rc = withExtendedLifetime(target) {
                body.withUnsafeBytes { bytes in
                    message.withUnsafeMutableBufferPointer { text in
                        thumbd_jpeg_decode(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count,
                                           Int32(eighths), nil, DecodeTarget.pixels, DecodeTarget.stop, context,
                                           text.baseAddress, text.count)
                    }
                }
            }
        case .feed(let feed):
            target = DecodeTarget(control, feed: feed)
            let context = Unmanaged.passUnretained(target).toOpaque()
            rc = withExtendedLifetime(target) {
                message.withUnsafeMutableBufferPointer { text in
                    thumbd_jpeg_decode(nil, 0, Int32(eighths), DecodeTarget.read, DecodeTarget.pixels, DecodeTarget.stop,
                                       context, text.baseAddress, text.count)
                }
            }
        }
        switch rc {
        case 0:
            guard let pixels = target.take() else { throw .notAnImage("libjpeg gave no pixels") }
            return try VipsImageHandle(else: { .notAnImage($0) }) {
                thumbd_vips_image_from_pixels(pixels, Int32(target.width), Int32(target.height), Int32(target.bands),
                                              Int32(orientation), &$0)
            }
        case 1:
            return nil
        case -1:
            throw control.failure(otherwise: .failed("the decode's memory could not be had"))
        default:
            let reason = message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw .notAnImage(reason.isEmpty ? "libjpeg could not decode the image" : reason)
        }
    }
}

/// Where one decode's bytes come from (a feed; a body is read by libjpeg itself), where its
/// pixels go, and what stops it: the callbacks' context. Owns the pixels until `take()`
/// hands them on (to the image that frees them), and frees them in `deinit` if the decode
/// failed after they were made.
private final class DecodeTarget {
    private let control: ResizeControl
    private let feed: ByteFeed?
    private var pixels: UnsafeMutableRawPointer?
    private(set) var width = 0
    private(set) var height = 0
    private(set) var bands = 0

    init(_ control: ResizeControl, feed: ByteFeed?) {
        self.control = control
        self.feed = feed
    }

    deinit { free(pixels) }

    func take() -> UnsafeMutableRawPointer? {
        defer { pixels = nil }
        return pixels
    }

    static let pixels: thumbd_jpeg_pixels_fn = { context, width, height, bands in
        guard let context, width > 0, height > 0, bands > 0 else { return nil }
        let target = Unmanaged<DecodeTarget>.fromOpaque(context).takeUnretainedValue()
        guard let memory = malloc(Int(width) * Int(height) * Int(bands)) else { return nil }
        target.pixels = memory
        (target.width, target.height, target.bands) = (Int(width), Int(height), Int(bands))
        return memory.assumingMemoryBound(to: UInt8.self)
    }

    static let read: thumbd_jpeg_read_fn = { context, buffer, length in
        guard let context, let buffer, length > 0,
              let feed = Unmanaged<DecodeTarget>.fromOpaque(context).takeUnretainedValue().feed else { return -1 }
        return Int64(feed.read(into: buffer, length: Int(length)))
    }

    static let stop: thumbd_jpeg_stop_fn = { context in
        guard let context else { return 1 }
        let control = Unmanaged<DecodeTarget>.fromOpaque(context).takeUnretainedValue().control
        return control.isCancelled || control.isExpired ? 1 : 0
    }
}
