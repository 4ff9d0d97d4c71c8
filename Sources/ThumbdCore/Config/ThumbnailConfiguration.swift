import Configuration
import Foundation
import Thumbnailer

/// The thumbnailer's own defaults: each setting below that it uses starts from it, so a
/// default is written once, where the value is used.
private let thumbnailerDefaults = Thumbnailer.Configuration()

/// Resizing with libvips. Keys live under `thumbnails.`.
package struct ThumbnailConfiguration: Sendable {
    /// `thumbnails.maxSourcePixels`: a source with more pixels (width × height, from its
    /// header, before any decode) is refused with 422 `image_too_large`. imgproxy's default.
    package var maxSourcePixels = thumbnailerDefaults.maxSourcePixels
    /// `thumbnails.maxOutputPixels`: a larger `w` × `h` is refused with 400 `output_too_large`.
    package var maxOutputPixels = thumbnailerDefaults.maxOutputPixels
    /// `thumbnails.timeLimitSeconds`: one resize's decode and encode; past it libvips's
    /// evaluation is killed and the answer is 503 `resize_timeout`.
    package var timeLimitSeconds = Double(thumbnailerDefaults.timeLimit / .milliseconds(1)) / 1000
    /// `thumbnails.workers`: resizes that run at once, each on its own thread (the resize
    /// lane); the cheap work never waits for them. Default: the number of cores.
    package var workers = ProcessInfo.processInfo.activeProcessorCount
    /// `thumbnails.maxQueued`: resizes that may wait for a worker; past it 503 `busy` with
    /// `Retry-After`.
    package var maxQueued = 64
    /// `thumbnails.streams`: JPEG originals of a batch's on-screen items decoded while they
    /// download, at once, each on one of the resize lane's stream workers, which waits
    /// whenever it has caught up with the bytes, at the daemon's own priority, within 8 MiB
    /// of estimated memory counted in `maxMemoryBytes` (0:
    /// none; every resize then starts once its original is whole). A download is slower than
    /// its decode, so a stream mostly waits: a screen of large photos is decoded while it
    /// arrives instead of after. `/thumb` never streams; an item off screen only if it comes
    /// on screen while at most 4 MiB of its original have come. An on-screen original whose
    /// body is whole before a slot frees takes one of a few slots beyond these (one per core).
    /// 32 covers the page's first screen at about 1440x900. With 16, the 28 tiles of a
    /// 1280x900 screen did not all stream: the others were decoded once whole, when the
    /// downloads ended (most in the lane), and the screen's last tiles came 0.3 to 0.6 s after
    /// its last byte.
    package var streams = 32
    /// `thumbnails.maxMemoryBytes`: the memory all running decodes (resizes and streams) may hold together, by the
    /// estimate made from each image's header before it is decoded. A resize waits until its
    /// estimate fits; one that could never fit is refused (422 `resize_too_costly`).
    package var maxMemoryBytes = thumbnailerDefaults.maxMemoryBytes
    /// `thumbnails.maxAvifPixels`: the largest AVIF thumbnail (libheif's encode is one call
    /// that cannot be stopped, so its size bounds its time). Larger: `format=auto` encodes
    /// WebP instead, `format=avif` is refused (422 `resize_too_costly`).
    package var maxAVIFPixels = thumbnailerDefaults.maxAVIFPixels
    /// `thumbnails.autoFormats`: what `format=auto` may answer, most preferred first; it
    /// answers the first the client's `Accept` lists (JPEG when none). JPEG first by
    /// default: for grid tiles it encodes 2-12x faster than WebP and 5-18x faster than AVIF
    /// (`scripts/bench formats`), and the bytes AVIF or WebP would save cost well under a
    /// millisecond to move over loopback, where thumbd answers. Put `avif` or `webp` first
    /// when thumbd serves clients over a real network.
    package var autoFormats: [ImageFormat] = [.jpeg, .webp, .avif]
    /// `thumbnails.maxFrames`: an animated GIF or WebP with at most this many frames stays
    /// animated when the output can animate (WebP, GIF), its frames' pixels summed against
    /// `maxSourcePixels`; with more, the thumbnail is made of its first frame.
    package var maxFrames = thumbnailerDefaults.maxFrames
    /// `thumbnails.presets`: named sets of thumbnail parameters, asked for by `preset=NAME`.
    /// In the file, a mapping (`avatar: {w: 128, h: 128, fit: cover}`); in
    /// `THUMBD_THUMBNAILS_PRESETS`, the same as a JSON object.
    package var presets: [String: [String: String]] = [:]
    /// `thumbnails.onlyPresets`: refuse every thumbnail parameter but `preset` (400), so that
    /// pages cannot mint unbounded variants. Originals are still served.
    package var onlyPresets = false
    /// `thumbnails.pagePreset`: the preset thumbd's own page (`GET /`) asks every tile with,
    /// instead of its laid-out size. Empty: the laid-out size, or under `onlyPresets` (which
    /// refuses sizes) the first preset by name.
    package var pagePreset = ""

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "thumbnails")
        maxSourcePixels = try r.int("maxSourcePixels", maxSourcePixels)
        maxOutputPixels = try r.int("maxOutputPixels", maxOutputPixels)
        timeLimitSeconds = try r.double("timeLimitSeconds", timeLimitSeconds)
        workers = try r.int("workers", workers)
        maxQueued = try r.int("maxQueued", maxQueued)
        streams = try r.int("streams", streams)
        maxMemoryBytes = try r.int("maxMemoryBytes", maxMemoryBytes)
        maxAVIFPixels = try r.int("maxAvifPixels", maxAVIFPixels)
        maxFrames = try r.int("maxFrames", maxFrames)
        if let text = r.optionalString("presets") { presets = try Presets.parse(json: text) }
        onlyPresets = try r.bool("onlyPresets", onlyPresets)
        pagePreset = r.string("pagePreset", pagePreset)
        let formats = r.strings("autoFormats", autoFormats.map(\.rawValue))
        autoFormats = try formats.map { name in
            guard let format = ImageFormat(rawValue: name.lowercased()), format != .png, format != .gif else {
                throw ConfigurationError(key: "thumbnails.autoFormats", reason: "\(name) is not jpeg, webp or avif")
            }
            return format
        }
        try validate()
    }

    package func validate() throws {
        try require(maxSourcePixels >= 1_000_000, "thumbnails.maxSourcePixels", "must be at least 1000000")
        try require(maxOutputPixels >= 64 * 64, "thumbnails.maxOutputPixels", "must be at least 4096")
        try require(timeLimitSeconds > 0, "thumbnails.timeLimitSeconds", "must be positive")
        try require(workers >= 1, "thumbnails.workers", "must be at least 1")
        try require(maxQueued >= 0, "thumbnails.maxQueued", "must not be negative")
        try require(streams >= 0, "thumbnails.streams", "must not be negative")
        try require(maxMemoryBytes >= 16 << 20, "thumbnails.maxMemoryBytes", "must be at least 16777216 (16 MiB)")
        try require(maxAVIFPixels >= 64 * 64, "thumbnails.maxAvifPixels", "must be at least 4096")
        try require(maxFrames >= 1, "thumbnails.maxFrames", "must be at least 1")
        try require(!onlyPresets || !presets.isEmpty, "thumbnails.onlyPresets", "needs at least one of thumbnails.presets")
        try require(pagePreset.isEmpty || presets[pagePreset] != nil, "thumbnails.pagePreset",
                    "names no preset of thumbnails.presets (\(presets.keys.sorted().joined(separator: ", ")))")
        try require(!autoFormats.isEmpty, "thumbnails.autoFormats", "must name at least one of jpeg, webp, avif")
    }

    /// The thumbnailer's settings. One libvips thread per resize: the resize lane already
    /// runs `workers` resizes at once, and a pipeline's threads would only contend.
    var thumbnailer: Thumbnailer.Configuration {
        var settings = Thumbnailer.Configuration()
        settings.maxSourcePixels = maxSourcePixels
        settings.maxOutputPixels = maxOutputPixels
        settings.timeLimit = .milliseconds(Int(timeLimitSeconds * 1000))
        settings.maxMemoryBytes = maxMemoryBytes
        settings.maxAVIFPixels = maxAVIFPixels
        settings.maxFrames = maxFrames
        settings.threads = 1
        return settings
    }

    /// The preset thumbd's own page asks with (nil: the tiles' laid-out size).
    var pageAsks: String? { pagePreset.isEmpty ? (onlyPresets ? presets.keys.sorted().first : nil) : pagePreset }

    /// What `preset=NAME` may name, and whether nothing else is taken.
    var presetRules: Presets { Presets(named: presets, only: onlyPresets) }

    /// The resize lane's settings.
    var lane: ResizeLane.Configuration {
        ResizeLane.Configuration(workers: workers, maxQueued: maxQueued, maxMemoryBytes: maxMemoryBytes,
                                 timeLimit: .milliseconds(Int(timeLimitSeconds * 1000)),
                                 streamWorkers: streams > 0 ? streams + StreamedDecode.Slots.extraSlots : 0)
    }
}
