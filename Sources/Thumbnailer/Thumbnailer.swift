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
        /// libvips worker threads per pipeline (set once per process, by the first thumbnailer).
        public var threads = 1

        public init() {}

        public var limits: ThumbnailPlan.Limits {
            .init(maxSourcePixels: maxSourcePixels, maxOutputPixels: maxOutputPixels, maxMemoryBytes: maxMemoryBytes,
                  maxAVIFPixels: maxAVIFPixels)
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
        canEncodeAVIF = Self.probeAVIF()
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
                           pages: max(1, Int(raw.pages)), orientation: Int(raw.orientation), source: format)
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

    /// Makes the thumbnail `plan` describes, stopped by `control`. With `preview`, a tiny
    /// WebP of the same pixels is made between the resize and the encode (the encode, AVIF
    /// above all, is the slow part) and handed to `preview` before the encode starts: one
    /// decode gives both. A preview that cannot be made is skipped; the thumbnail goes on.
    public func thumbnail(of body: Bytes, _ plan: ThumbnailPlan, control: ResizeControl,
                          preview: ((Thumbnail) -> Void)? = nil) throws(ThumbnailerError) -> Thumbnail {
        if control.isCancelled { throw .cancelled }
        let loaded = try VipsImageHandle(else: { .notAnImage($0) }) { out in
            body.withUnsafeBytes { thumbd_vips_load(plan.source.source.code, $0.baseAddress, $0.count, Int32(plan.loadShrink), &out) }
        }
        return try make(from: loaded, plan, control: control, preview: preview)
    }

    /// The thumbnail of a JPEG still downloading: the same steps as `thumbnail(of:…)`, with
    /// the decoder reading `feed` as its bytes arrive (it waits when it has caught up), so
    /// that the decode is done soon after the last byte instead of starting then. `plan`
    /// comes from the header of the feed's first bytes. The result is the one the whole body
    /// would give. A feed that fails fails the decode (`notAnImage`); a cancel must end the
    /// feed too, or a decode waiting for bytes would wait for them.
    ///
    /// The decode runs in the calling thread (no libvips worker), at its priority: the
    /// caller chooses it. Only the small encode uses libvips's workers.
    public func thumbnail(streaming feed: ByteFeed, _ plan: ThumbnailPlan, control: ResizeControl,
                          preview: ((Thumbnail) -> Void)? = nil) throws(ThumbnailerError) -> Thumbnail {
        if control.isCancelled { throw .cancelled }
        guard plan.source.source == .jpeg, let source = FeedSource(feed) else { throw .unsupportedFormat }
        return try withExtendedLifetime(source) { () throws(ThumbnailerError) -> Thumbnail in
            let loaded = try VipsImageHandle(else: { .notAnImage($0) }) { out in
                thumbd_vips_load_jpeg_source(source.raw, Int32(plan.loadShrink), &out)
            }
            return try make(from: loaded, plan, control: control, inThisThread: true, preview: preview)
        }
    }

    /// From the loaded (not yet decoded) image: crop, resize, decode, preview, encode. The
    /// decode runs on libvips's workers, or `inThisThread`.
    private func make(from loaded: VipsImageHandle, _ plan: ThumbnailPlan, control: ResizeControl, inThisThread: Bool = false,
                      preview: ((Thumbnail) -> Void)?) throws(ThumbnailerError) -> Thumbnail {
        let spec = plan.spec
        var image = loaded
        if let aspect = plan.cropAspect, let crop = ThumbnailPlan.centreCrop(of: (loaded.width, loaded.height), aspect: aspect) {
            image = try VipsImageHandle(else: { .resizeRefused($0) }) {
                thumbd_vips_crop(loaded.raw, Int32(crop.left), Int32(crop.top), Int32(crop.width), Int32(crop.height), &$0)
            }
        }
        let (size, interesting): (VipsSize, VipsInteresting) = switch plan.resize {
        case .exact: (VIPS_SIZE_FORCE, VIPS_INTERESTING_NONE)
        case .inside: (VIPS_SIZE_BOTH, VIPS_INTERESTING_NONE)
        case .down: (VIPS_SIZE_DOWN, VIPS_INTERESTING_NONE)
        case .attention: (VIPS_SIZE_BOTH, VIPS_INTERESTING_ATTENTION)
        }
        let resized = try VipsImageHandle(else: { .resizeRefused($0) }) { [image] in
            thumbd_vips_resize(image.raw, Int32(plan.box.width), Int32(plan.box.height), Int32(size.rawValue),
                               Int32(interesting.rawValue), &$0)
        }
        // The decoder runs here, tile by tile (or strip by strip), under the control.
        var final: VipsImageHandle
        if inThisThread {
            final = try VipsImageHandle(else: { control.failure(otherwise: .notAnImage($0)) }) {
                thumbd_vips_materialize_here(resized.raw, control.raw, &$0)
            }
        } else {
            control.watch(resized.raw)
            final = try VipsImageHandle(else: { control.failure(otherwise: .notAnImage($0)) }) {
                thumbd_vips_materialize(resized.raw, &$0)
            }
        }
        switch plan.finish {
        case .pad where final.width != plan.box.width || final.height != plan.box.height:
            let transparent: Int32 = spec.format.hasAlpha ? 1 : 0
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in
                thumbd_vips_pad(final.raw, Int32(plan.box.width), Int32(plan.box.height), transparent, &$0)
            }
        case .stretch where final.width != plan.box.width || final.height != plan.box.height:
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in
                thumbd_vips_stretch(final.raw, Int32(plan.box.width), Int32(plan.box.height), &$0)
            }
        default:
            break
        }
        guard final.width * final.height <= configuration.maxOutputPixels else {
            throw .outputTooLarge(width: final.width, height: final.height, limit: configuration.maxOutputPixels)
        }
        if let preview, let tiny = try? Self.preview(of: final) { preview(tiny) }
        control.watch(final.raw)
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_save(final.raw, spec.format.code, Int32(spec.quality), &buffer, &length) == 0, let buffer else {
            throw control.failure(otherwise: .failed(Self.takeError()))
        }
        defer { thumbd_vips_free(buffer) }
        let bytes = Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
        return Thumbnail(body: bytes, format: spec.format, width: final.width, height: final.height)
    }

    /// A preview of decoded pixels (the tile's, already small): resized to fit
    /// `previewBox`, encoded as WebP.
    private static func preview(of image: VipsImageHandle) throws(ThumbnailerError) -> Thumbnail {
        let tiny = try VipsImageHandle(else: { .resizeRefused($0) }) {
            thumbd_vips_resize(image.raw, Int32(previewBox), Int32(previewBox), Int32(VIPS_SIZE_BOTH.rawValue),
                               Int32(VIPS_INTERESTING_NONE.rawValue), &$0)
        }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard thumbd_vips_save(tiny.raw, ImageFormat.webp.code, Int32(previewQuality), &buffer, &length) == 0, let buffer else {
            throw .failed(takeError())
        }
        defer { thumbd_vips_free(buffer) }
        return Thumbnail(body: Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length)), format: .webp,
                         width: tiny.width, height: tiny.height)
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

    private static func probeAVIF() -> Bool {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let rc = thumbd_vips_make_test_image(16, 16, 3, Int32(THUMBD_AVIF), 1, &buffer, &length)
        if let buffer { thumbd_vips_free(buffer) }
        if rc != 0 { _ = takeError() }
        return rc == 0 && length > 0
    }
}

/// One VipsImage reference, owned here and released in one place (deinit). A failed make
/// becomes the error `failure` names from libvips's text.
private final class VipsImageHandle {
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
