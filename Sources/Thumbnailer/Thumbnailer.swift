internal import CVips
import Foundation
import Support
import Synchronization

/// What an image is, from its header alone (no pixel decoded).
public struct ImageHeader: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var hasAlpha: Bool
    /// Frames of an animation (1 for a still image).
    public var pages: Int
    /// EXIF orientation (1–8; 5–8 swap width and height once applied).
    public var orientation: Int = 1
    /// libvips's loader class (`VipsForeignLoadJpegBuffer`, …).
    public var loader: String

    /// The source's format, from its loader, when thumbd can encode it.
    public var format: ImageFormat? {
        let name = loader.lowercased()
        if name.contains("jpeg") { return .jpeg }
        if name.contains("png") { return .png }
        if name.contains("webp") { return .webp }
        if name.contains("heif") { return .avif }
        return nil
    }

    public var pixels: Int { width * height }
}

public enum ImageFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, avif

    public var mimeType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .png: "image/png"
        case .webp: "image/webp"
        case .avif: "image/avif"
        }
    }

    public var hasAlpha: Bool { self != .jpeg }

    fileprivate var code: Int32 {
        switch self {
        case .jpeg: Int32(THUMBD_JPEG)
        case .png: Int32(THUMBD_PNG)
        case .webp: Int32(THUMBD_WEBP)
        case .avif: Int32(THUMBD_AVIF)
        }
    }
}

/// How the image meets the box.
public enum Fit: String, Sendable, CaseIterable {
    /// Fill the box, crop the overflow.
    case cover
    /// Fit inside the box, pad the rest (transparent where the format allows, else white).
    case contain
    /// Stretch to the box.
    case fill
    /// Fit inside the box, never enlarged.
    case inside
}

/// Which part `cover` keeps.
public enum Gravity: String, Sendable, CaseIterable {
    case center
    /// libvips's smart crop.
    case attention
}

/// One thumbnail's parameters, in the thumbnailer's terms.
public struct ThumbnailSpec: Sendable, Equatable {
    public var width: Int?
    public var height: Int?
    public var fit: Fit
    public var gravity: Gravity
    public var format: ImageFormat
    public var quality: Int

    public init(width: Int?, height: Int?, fit: Fit = .cover, gravity: Gravity = .center, format: ImageFormat, quality: Int) {
        self.width = width
        self.height = height
        self.fit = fit
        self.gravity = gravity
        self.format = format
        self.quality = quality
    }
}

/// An encoded thumbnail.
public struct Thumbnail: Sendable {
    public var body: Bytes
    public var format: ImageFormat
    public var width: Int
    public var height: Int
}

public enum ThumbnailerError: Error, Sendable, Equatable {
    /// libvips cannot read it as an image (an unknown format, a corrupt header or body).
    case notAnImage(String)
    /// More source pixels than allowed (judged from the header, before any decode).
    case tooManyPixels(width: Int, height: Int, limit: Int)
    /// The output would be larger than allowed.
    case outputTooLarge(width: Int, height: Int, limit: Int)
    /// The resize ran past its time limit and was killed.
    case timedOut(Duration)
    /// The encoder failed.
    case failed(String)
}

/// libvips behind a small, thread-safe API that knows no product type: read a header,
/// make a thumbnail. libvips is initialised once per process, its operation cache is off
/// (every variant is stored by the caller; the cache would only hold memory) and each
/// pipeline uses `threads` threads, so memory and CPU stay bounded by the caller's
/// concurrency.
public final class Thumbnailer: Sendable {
    public struct Configuration: Sendable {
        /// Source images with more pixels are refused from their header (imgproxy's default).
        public var maxSourcePixels = 50_000_000
        /// Thumbnails larger than this (width × height) are refused.
        public var maxOutputPixels = 16_000_000
        /// One thumbnail's decode, resize and encode; past it the evaluation is killed.
        public var timeLimit: Duration = .seconds(10)
        /// libvips worker threads per pipeline (set once per process, by the first thumbnailer).
        public var threads = 1

        public init() {}
    }

    public let configuration: Configuration
    /// Whether this libvips can encode AVIF (a heif build with an AV1 encoder).
    public let canEncodeAVIF: Bool

    private static let started = Mutex<Int32?>(nil)
    /// Header reads take turns: making and freeing libvips objects takes GLib's type locks
    /// and libvips's global object table, and two reads side by side cost each other
    /// 10–15 µs of CPU (a 12 KB JPEG: 20 µs alone, 37–46 µs each side by side, 29–35 µs
    /// taking turns). Resizes are not serialized.
    private static let headerTurn = Mutex(())

    public init(configuration: Configuration = Configuration()) throws(ThumbnailerError) {
        let rc = Self.started.withLock { started -> Int32 in
            if let started { return started }
            let rc = thumbd_vips_start(Int32(configuration.threads))
            started = rc
            return rc
        }
        guard rc == 0 else { throw .failed("vips_init failed: \(Self.takeError())") }
        self.configuration = configuration
        canEncodeAVIF = Self.probeAVIF()
    }

    /// The header, read without decoding pixels.
    public func header(of body: Bytes) throws(ThumbnailerError) -> ImageHeader {
        var raw = thumbd_vips_header()
        // The error is taken inside the turn, so that it is this read's.
        let failure: String? = Self.headerTurn.withLock { _ in
            let rc = body.withUnsafeBytes { thumbd_vips_read_header($0.baseAddress, $0.count, &raw) }
            return rc == 0 ? nil : Self.takeError()
        }
        if let failure { throw .notAnImage(failure) }
        let loader = withUnsafeBytes(of: raw.loader) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return ImageHeader(width: Int(raw.width), height: Int(raw.height), hasAlpha: raw.has_alpha != 0,
                           pages: max(1, Int(raw.pages)), orientation: Int(raw.orientation), loader: loader)
    }

    /// Checks the header against the limits and makes the thumbnail. `header`: the body's,
    /// when the caller has read it already.
    public func thumbnail(of body: Bytes, header known: ImageHeader? = nil, _ spec: ThumbnailSpec) throws(ThumbnailerError) -> Thumbnail {
        let source: ImageHeader
        if let known { source = known } else { source = try header(of: body) }
        guard source.pixels <= configuration.maxSourcePixels else {
            throw .tooManyPixels(width: source.width, height: source.height, limit: configuration.maxSourcePixels)
        }
        let box = (width: spec.width ?? Int(VIPS_MAX_COORD), height: spec.height ?? Int(VIPS_MAX_COORD))
        if let width = spec.width, let height = spec.height, width * height > configuration.maxOutputPixels {
            throw .outputTooLarge(width: width, height: height, limit: configuration.maxOutputPixels)
        }
        let oneSide = spec.width == nil || spec.height == nil
        let size: VipsSize
        let crop: VipsInteresting
        switch spec.fit {
        case .cover where !oneSide:
            size = VIPS_SIZE_BOTH
            crop = spec.gravity == .attention ? VIPS_INTERESTING_ATTENTION : VIPS_INTERESTING_CENTRE
        case .contain where !oneSide, .fill where !oneSide:
            size = VIPS_SIZE_BOTH
            crop = VIPS_INTERESTING_NONE
        default:  // inside, or one side given: keep the ratio, never enlarge
            size = VIPS_SIZE_DOWN
            crop = VIPS_INTERESTING_NONE
        }
        let shrink = source.format == .jpeg ? Self.jpegShrink(source, spec) : 1
        var image = try VipsImageHandle { out in
            body.withUnsafeBytes {
                shrink > 1
                    ? thumbd_vips_thumbnail_shrunk($0.baseAddress, $0.count, Int32(shrink), Int32(box.width), Int32(box.height),
                                                   Int32(size.rawValue), Int32(crop.rawValue), &out)
                    : thumbd_vips_thumbnail($0.baseAddress, $0.count, Int32(box.width), Int32(box.height),
                                            Int32(size.rawValue), Int32(crop.rawValue), &out)
            }
        }
        if !oneSide {
            switch spec.fit {
            case .contain where image.width != box.width || image.height != box.height:
                let transparent: Int32 = spec.format.hasAlpha ? 1 : 0
                image = try VipsImageHandle { thumbd_vips_pad(image.raw, Int32(box.width), Int32(box.height), transparent, &$0) }
            case .fill where image.width != box.width || image.height != box.height:
                image = try VipsImageHandle { thumbd_vips_stretch(image.raw, Int32(box.width), Int32(box.height), &$0) }
            default:
                break
            }
        }
        guard image.width * image.height <= configuration.maxOutputPixels else {
            throw .outputTooLarge(width: image.width, height: image.height, limit: configuration.maxOutputPixels)
        }
        let started = ContinuousClock.now
        let limit = configuration.timeLimit
        thumbd_vips_set_deadline(image.raw, gint64(limit / .microseconds(1)))
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_save(image.raw, spec.format.code, Int32(spec.quality), &buffer, &length) == 0, let buffer else {
            let reason = Self.takeError()
            if ContinuousClock.now - started >= limit { throw .timedOut(limit) }
            // A body libvips could not decode (truncated, corrupt) fails here, at the first pixel read.
            let text = reason.lowercased()
            let undecodable = ["load", "read", "premature", "truncated", "corrupt", "bad seek", "invalid"]
            throw undecodable.contains(where: text.contains) ? .notAnImage(reason) : .failed(reason)
        }
        defer { thumbd_vips_free(buffer) }
        let bytes = Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
        return Thumbnail(body: bytes, format: spec.format, width: image.width, height: image.height)
    }

    /// The largest JPEG decode shrink (8, 4 or 2) that still leaves at least the pixels the
    /// thumbnail needs: libjpeg then decodes only those (imgproxy and PIL's draft mode do the
    /// same). 1 when the target is too close to the source to gain anything.
    static func jpegShrink(_ source: ImageHeader, _ spec: ThumbnailSpec) -> Int {
        let swapped = (5...8).contains(source.orientation)
        let width = Double(swapped ? source.height : source.width)
        let height = Double(swapped ? source.width : source.height)
        let ratios = [spec.width.map { width / Double($0) }, spec.height.map { height / Double($0) }].compactMap { $0 }
        guard let smallest = ratios.min(), let largest = ratios.max() else { return 1 }
        // cover and fill need both sides at least as large as the box; the others only the
        // side that decides the fit.
        let both = spec.width != nil && spec.height != nil && (spec.fit == .cover || spec.fit == .fill)
        let factor = both ? smallest : largest
        for shrink in [8, 4, 2] where factor >= Double(shrink) { return shrink }
        return 1
    }

    /// An encoded test image: a gradient with noise (so it compresses like a photo, not a
    /// flat colour), optionally with alpha and an EXIF orientation (JPEG). For tests and the
    /// bench; libvips draws it.
    public func testImage(width: Int, height: Int, alpha: Bool = false, format: ImageFormat = .jpeg,
                          orientation: Int = 1) throws(ThumbnailerError) -> Bytes {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_make_test_image(Int32(width), Int32(height), alpha ? 4 : 3, format.code, Int32(orientation),
                                          &buffer, &length) == 0, let buffer else {
            throw .failed(Self.takeError())
        }
        defer { thumbd_vips_free(buffer) }
        return Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
    }

    private static func takeError() -> String {
        guard let text = thumbd_vips_take_error() else { return "unknown libvips error" }
        defer { thumbd_vips_free(text) }
        let message = String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
        return message.isEmpty ? "unknown libvips error" : message
    }

    private static func probeAVIF() -> Bool {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let rc = thumbd_vips_make_test_image(16, 16, 3, Int32(THUMBD_AVIF), 1, &buffer, &length)
        if let buffer { thumbd_vips_free(buffer) }
        if rc != 0 { _ = takeError() }
        return rc == 0 && length > 0
    }
}

/// One VipsImage reference, owned here and released in one place (deinit).
private final class VipsImageHandle {
    let raw: UnsafeMutablePointer<VipsImage>

    init(_ make: (inout UnsafeMutablePointer<VipsImage>?) -> Int32) throws(ThumbnailerError) {
        var out: UnsafeMutablePointer<VipsImage>?
        let rc = make(&out)
        guard rc == 0, let out else {
            let text = thumbd_vips_take_error().map { pointer in
                defer { thumbd_vips_free(pointer) }
                return String(cString: pointer)
            } ?? "unknown libvips error"
            throw .notAnImage(text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        raw = out
    }

    deinit { thumbd_vips_unref(raw) }

    var width: Int { Int(vips_image_get_width(raw)) }
    var height: Int { Int(vips_image_get_height(raw)) }
}
