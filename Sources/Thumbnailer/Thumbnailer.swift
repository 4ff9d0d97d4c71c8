internal import CVips
import Foundation
import Support
import Synchronization

/// libvips behind a small, thread-safe API that knows no product type: read a header, plan
/// a thumbnail's cost, make it. libvips is initialised once per process with only the
/// modules and loaders thumbd uses (see `thumbd_vips_start`), its operation cache is off
/// (every variant is stored by the caller; the cache would only hold memory) and each
/// pipeline uses `threads` threads, so memory and CPU stay bounded by the caller's
/// concurrency.
///
/// A thumbnail is made in steps, and a failure is named by its step: the loader of the
/// sniffed format reads the header (415 when it refuses); the crop and resize are built
/// (refused for these parameters); the resized pixels are computed into memory, which is
/// where the decoder runs (a corrupt body: 415); the encoder runs on a copy that carries no
/// metadata. The decode and the encode are watched by a `ResizeControl`: past the deadline
/// or once cancelled, libvips stops at its next tile.
public final class Thumbnailer: Sendable {
    public struct Configuration: Sendable {
        /// Source images with more pixels are refused from their header (imgproxy's default).
        public var maxSourcePixels = 50_000_000
        /// Thumbnails (and any intermediate image) larger than this (width × height) are refused.
        public var maxOutputPixels = 16_000_000
        /// One resize's estimated memory may not exceed this.
        public var maxMemoryBytes = 512 << 20
        /// AVIF outputs larger than this are refused (its encode cannot be stopped).
        public var maxAVIFPixels = 2_500_000
        /// One thumbnail's decode, resize and encode; past it the evaluation is killed.
        public var timeLimit: Duration = .seconds(10)
        /// An animated GIF or WebP with more frames is made from its first frame (imgproxy's
        /// `MAX_ANIMATION_FRAMES`); its frames' pixels together count against `maxSourcePixels`.
        public var maxFrames = 100
        /// libvips worker threads per pipeline (set once per process, by the first thumbnailer).
        public var threads = 1

        public init() {}

        public var limits: ThumbnailPlan.Limits {
            .init(maxSourcePixels: maxSourcePixels, maxOutputPixels: maxOutputPixels, maxMemoryBytes: maxMemoryBytes,
                  maxAVIFPixels: maxAVIFPixels, maxFrames: maxFrames)
        }
    }

    public let configuration: Configuration
    /// Whether this libvips can encode AVIF (a heif build with an AV1 encoder).
    public let canEncodeAVIF: Bool

    private static let started = Mutex<Int32?>(nil)
    private static let restricted = Mutex(false)

    /// Whether libvips started with the HEIF module alone (the private module directory
    /// could be laid out). False: it loaded every module of its own directory (loaders other
    /// than thumbd's are still blocked, but their libraries are mapped); the daemon says so
    /// at start.
    public static var modulesRestricted: Bool { restricted.withLock { $0 } }
    /// Header reads take turns: making and freeing libvips objects takes GLib's type locks
    /// and libvips's global object table, and two reads side by side cost each other
    /// 10–15 µs of CPU. Resizes are not serialized.
    private static let headerTurn = Mutex(())
    /// libvips 8.14 keeps one error buffer for the whole process: it is read and cleared
    /// under this lock, right after the call that failed, and only ever logged.
    private static let errorTurn = Mutex(())

    public init(configuration: Configuration = Configuration()) throws(ThumbnailerError) {
        let rc = Self.started.withLock { started -> Int32 in
            if let started { return started }
            let overlay = ModuleOverlay.make()
            defer { overlay?.remove() }
            Self.restricted.withLock { $0 = overlay != nil }
            let rc = overlay.map { thumbd_vips_start(Int32(configuration.threads), $0.home.path) }
                ?? thumbd_vips_start(Int32(configuration.threads), nil)
            started = rc
            return rc
        }
        guard rc == 0 else { throw .failed("vips_init failed: \(Self.takeError())") }
        self.configuration = configuration
        canEncodeAVIF = thumbd_vips_can_save_avif() != 0
    }

    /// Whether this libvips has the loader of `format` (HEIF comes from a module).
    public static func canDecode(_ format: SourceFormat) -> Bool { thumbd_vips_has_loader(format.code) != 0 }

    /// The header, read by the loader of the sniffed format without decoding pixels.
    public func header(of body: Bytes) throws(ThumbnailerError) -> ImageHeader {
        guard let format = SourceFormat.sniff(body) else { throw .unsupportedFormat }
        return try header(of: body, format: format)
    }

    /// The header, read by the loader of `format` (and no other) without decoding pixels.
    public func header(of body: Bytes, format: SourceFormat) throws(ThumbnailerError) -> ImageHeader {
        var raw = thumbd_vips_header()
        let failure: String? = Self.headerTurn.withLock { _ in
            let rc = body.withUnsafeBytes { thumbd_vips_read_header(format.code, $0.baseAddress, $0.count, &raw) }
            return rc == 0 ? nil : Self.takeError()
        }
        if let failure { throw .notAnImage(failure) }
        return ImageHeader(width: Int(raw.width), height: Int(raw.height), hasAlpha: raw.has_alpha != 0,
                           pages: max(1, Int(raw.pages)), orientation: Int(raw.orientation),
                           bands: Int(raw.bands), source: format)
    }

    /// What `spec` of an image with `header` will cost; throws when it is refused.
    public func plan(_ header: ImageHeader, _ spec: ThumbnailSpec) throws(ThumbnailerError) -> ThumbnailPlan {
        try ThumbnailPlan(source: header, spec: spec, limits: configuration.limits)
    }

    /// Reads the header, plans and makes the thumbnail within the configured time limit.
    public func thumbnail(of body: Bytes, _ spec: ThumbnailSpec) throws(ThumbnailerError) -> Thumbnail {
        let plan = try plan(try header(of: body), spec)
        return try thumbnail(of: body, plan, control: ResizeControl(timeLimit: configuration.timeLimit))
    }

    /// The preview `thumbnail(…, preview:)` makes: a WebP that fits 16×16, quality 40 (a few
    /// hundred bytes, painted blurred).
    public static let previewBox = 16
    public static let previewQuality = 40

    /// libvips's error text, read and cleared under `errorTurn`: for the log, never to decide.
    static func takeError() -> String {
        let text: String? = errorTurn.withLock { _ in
            guard let pointer = thumbd_vips_take_error() else { return nil }
            defer { thumbd_vips_free(pointer) }
            return String(cString: pointer)
        }
        let message = (text ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        return message.isEmpty ? "unknown libvips error" : String(message.prefix(500))
    }
}

/// One VipsImage reference, owned here and released in one place (deinit). A failed make
/// becomes the error `failure` names from libvips's text.
final class VipsImageHandle {
    let raw: UnsafeMutablePointer<VipsImage>

    init(else failure: (String) -> ThumbnailerError,
         _ make: (inout UnsafeMutablePointer<VipsImage>?) -> Int32) throws(ThumbnailerError) {
        var out: UnsafeMutablePointer<VipsImage>?
        let rc = make(&out)
        guard rc == 0, let out else {
            if let out { thumbd_vips_unref(out) }
            throw failure(Thumbnailer.takeError())
        }
        raw = out
    }

    deinit { thumbd_vips_unref(raw) }

    var width: Int { Int(vips_image_get_width(raw)) }
    var height: Int { Int(vips_image_get_height(raw)) }
}
