import Logging
import Support
import Thumbnailer

/// libvips's warnings, and those of the libraries under it (through GLib), in the daemon's
/// log, at most `libraryLogLines` a minute: a grid of AVIFs can say "ignoring nclx profile"
/// per tile.
extension Thumbd {
    /// At most this many lines a minute from the libraries under libvips; the next line
    /// says how many were left out.
    static let libraryLogLines = 20

    static func level(of level: LibraryLog.Level) -> Logger.Level {
        switch level {
        case .error, .critical: .error
        case .warning: .warning
        case .message: .notice
        // GLib's own handler shows these only with G_MESSAGES_DEBUG: libvips says a few per image.
        case .info, .debug: .debug
        }
    }

    /// Before libvips starts, so that its start's own warnings are logged too.
    func routeLibraryLog() {
        let libraryLog = RateLimitedLog(linesPerWindow: Self.libraryLogLines, window: .seconds(60))
        LibraryLog.route { [logger] domain, level, message in
            let level = Self.level(of: level)
            guard level >= logger.logLevel else { return }  // before the rate: debug lines use none of it
            libraryLog.run { suppressed in
                logger.log(level: level, "library", metadata: [
                    "library.domain": "\(domain)", "library.message": "\(message)", "log.suppressed": "\(suppressed)",
                ])
            }
        }
    }
}
