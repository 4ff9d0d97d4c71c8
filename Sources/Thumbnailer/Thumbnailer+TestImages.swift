internal import CVips
import Support

/// Images the tests and the bench draw with libvips, and the pixel a test reads back. The
/// daemon's own work never calls these.
extension Thumbnailer {
    /// An encoded test image: a gradient with noise (so it compresses like a photo, not a
    /// flat colour), optionally with alpha and an EXIF orientation (JPEG), or grey (one band;
    /// a JPEG keeps it). For tests and the bench; libvips draws it.
    public func testImage(width: Int, height: Int, alpha: Bool = false, grey: Bool = false, format: ImageFormat = .jpeg,
                          orientation: Int = 1) throws(ThumbnailerError) -> Bytes {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let bands: Int32 = grey ? 1 : alpha ? 4 : 3
        guard thumbd_vips_make_test_image(Int32(width), Int32(height), bands, format.code, Int32(orientation),
                                          &buffer, &length) == 0, let buffer else {
            throw .failed(Self.takeError())
        }
        defer { thumbd_vips_free(buffer) }
        return Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// Four flat quarters as stored (before any EXIF orientation): red top left, green top
    /// right, blue bottom left, yellow bottom right. `orientation` > 1 goes into a JPEG's EXIF.
    public func quadrants(width: Int, height: Int, format: ImageFormat = .png, orientation: Int = 1) throws(ThumbnailerError) -> Bytes {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_make_quadrants(Int32(width), Int32(height), format.code, Int32(orientation), &buffer, &length) == 0,
              let buffer else { throw .failed(Self.takeError()) }
        defer { thumbd_vips_free(buffer) }
        return Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// An animated GIF or WebP of `frames` flat grey frames, 100 ms each.
    public func animation(width: Int, height: Int, frames: Int, format: ImageFormat) throws(ThumbnailerError) -> Bytes {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_make_animation(Int32(width), Int32(height), Int32(frames), format.code, &buffer, &length) == 0,
              let buffer else { throw .failed(Self.takeError()) }
        defer { thumbd_vips_free(buffer) }
        return Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// The bands (0–255) of the pixel at (`x`, `y`) of an encoded image's first frame, as
    /// stored (no EXIF orientation applied).
    public func pixel(of body: Bytes, x: Int, y: Int) throws(ThumbnailerError) -> [Double] {
        guard let format = SourceFormat.sniff(body) else { throw .unsupportedFormat }
        let image = try VipsImageHandle(else: { .notAnImage($0) }) { out in
            body.withUnsafeBytes { thumbd_vips_load(format.code, $0.baseAddress, $0.count, 1, 1, &out) }
        }
        var values = [0.0, 0, 0, 0]
        var bands: Int32 = 0
        let rc = values.withUnsafeMutableBufferPointer { thumbd_vips_pixel(image.raw, Int32(x), Int32(y), $0.baseAddress, &bands) }
        guard rc == 0 else { throw .failed(Self.takeError()) }
        return Array(values.prefix(Int(bands)))
    }
}
