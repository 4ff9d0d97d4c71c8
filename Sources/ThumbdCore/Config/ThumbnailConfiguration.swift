public import Configuration
import Thumbnailer

/// Resizing with libvips. Keys live under `thumbnails.`.
public struct ThumbnailConfiguration: Sendable {
    /// `thumbnails.maxSourcePixels`: a source with more pixels (width × height, from its
    /// header, before any decode) is refused with 422 `image_too_large`. imgproxy's default.
    public var maxSourcePixels = 50_000_000
    /// `thumbnails.maxOutputPixels`: a larger `w` × `h` is refused with 400 `output_too_large`.
    public var maxOutputPixels = 16_000_000
    /// `thumbnails.timeLimitSeconds`: one resize's decode and encode; past it libvips's
    /// evaluation is killed and the answer is 503 `resize_timeout`.
    public var timeLimitSeconds = 10.0

    public init() {}

    public init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "thumbnails")
        maxSourcePixels = try r.int("maxSourcePixels", maxSourcePixels)
        maxOutputPixels = try r.int("maxOutputPixels", maxOutputPixels)
        timeLimitSeconds = try r.double("timeLimitSeconds", timeLimitSeconds)
        try validate()
    }

    public func validate() throws {
        try require(maxSourcePixels >= 1_000_000, "thumbnails.maxSourcePixels", "must be at least 1000000")
        try require(maxOutputPixels >= 64 * 64, "thumbnails.maxOutputPixels", "must be at least 4096")
        try require(timeLimitSeconds > 0, "thumbnails.timeLimitSeconds", "must be positive")
    }

    /// The thumbnailer's settings. One libvips thread per resize: the processing stage
    /// already runs one resize per core, and a pipeline's threads would only contend.
    var thumbnailer: Thumbnailer.Configuration {
        var settings = Thumbnailer.Configuration()
        settings.maxSourcePixels = maxSourcePixels
        settings.maxOutputPixels = maxOutputPixels
        settings.timeLimit = .milliseconds(Int(timeLimitSeconds * 1000))
        settings.threads = 1
        return settings
    }
}
