import ArgumentParser
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Support
import ThumbdClient
import ThumbdCore

/// The thumbnail parameters `thumbd warm` and `thumbd sign` take.
struct ThumbnailOptions: ParsableArguments {
    @Option(help: "Thumbnail width in pixels (a variant, not the original).")
    var width: Int?

    @Option(help: "Thumbnail height in pixels.")
    var height: Int?

    @Option(help: "cover, contain, fill or inside.")
    var fit: String?

    @Option(help: "Device pixel ratio, 1 to 4: multiplies the width and height.")
    var dpr: String?

    @Option(help: "center, n, s, e, w, ne, nw, se, sw, attention or focal (with --fx, --fy).")
    var gravity: String?

    @Option(help: "The focal point's x, 0 to 1 of the source's width (with --gravity focal).")
    var fx: String?

    @Option(help: "The focal point's y, 0 to 1 of the source's height.")
    var fy: String?

    @Option(help: "x,y,w,h: a rectangle of the source, cut before the resize.")
    var crop: String?

    @Option(help: "RRGGBB: the padding of contain, and JPEG's background.")
    var bg: String?

    @Option(help: "Gaussian blur sigma, 0.3 to 100.")
    var blur: String?

    @Option(help: "Sharpen sigma, 0.3 to 100.")
    var sharpen: String?

    @Option(help: "90, 180 or 270, clockwise after the EXIF orientation.")
    var rotate: String?

    @Flag(help: "A progressive JPEG, an interlaced PNG.")
    var progressive = false

    @Option(help: "A preset of the daemon's thumbnails.presets.")
    var preset: String?

    @Option(help: "jpeg, png, webp, avif or auto.")
    var format: String?

    @Option(help: "Quality, 1 to 100.")
    var quality: Int?

    /// As the daemon's query names them (`w`, `h`, `dpr`, `fit`, `gravity`, …), those given.
    var parameters: [String: String] {
        let all: [(String, String?)] = [
            ("w", width.map(String.init)), ("h", height.map(String.init)), ("dpr", dpr), ("fit", fit), ("gravity", gravity),
            ("fx", fx), ("fy", fy), ("crop", crop), ("bg", bg), ("blur", blur), ("sharpen", sharpen), ("rotate", rotate),
            ("progressive", progressive ? "1" : nil), ("preset", preset), ("format", format), ("q", quality.map(String.init)),
        ]
        return Dictionary(uniqueKeysWithValues: all.compactMap { name, value in value.map { (name, $0) } })
    }
}

/// The key `thumbd sign` and `thumbd warm` sign with.
struct SigningKeyOption: ParsableArguments {
    @Option(name: .customLong("sign-key"),
            help: "The signing key (default: $THUMBD_SIGNING_KEY, else the first of signing.keys in --config).")
    var key: String?

    @Option(help: "A YAML or JSON settings file whose signing.keys to use (default config/thumbd.yaml when present).")
    var config: String?

    /// The key, or nil when none is configured anywhere.
    func resolvedKey() async throws -> String? {
        if let key { return key }
        if let key = ProcessInfo.processInfo.environment["THUMBD_SIGNING_KEY"], !key.isEmpty { return key }
        let file = config ?? (FileManager.default.fileExists(atPath: "config/thumbd.yaml") ? "config/thumbd.yaml" : nil)
        do {
            return try await ThumbdConfiguration.load(file: file).signing.keys.first
        } catch let error as ConfigurationError {
            throw ValidationError(error.description)
        }
    }
}
