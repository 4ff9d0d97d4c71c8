internal import CVips
import Support

/// GLib's messages (libvips's warnings and those of the libraries under it: libheif's
/// "ignoring nclx profile", a truncated JPEG's "premature end of data") go to the sink
/// given here instead of straight to standard error, so they reach the daemon's log with
/// its format, level and rate limit. GLib's handler is process-wide: the last sink wins.
public enum LibraryLog {
    public enum Level: String, Sendable {
        case error, critical, warning, message, info, debug
    }

    public typealias Sink = @Sendable (_ domain: String, _ level: Level, _ message: String) -> Void

    /// What GLib calls through its context pointer: one for the process, installed with the
    /// first sink and never freed (GLib may be calling it on any thread at any moment); a
    /// later `route` replaces the sink inside it.
    private final class Box: Sendable {
        let sink = Slot<Sink>()
    }

    private static let box: Unmanaged<Box> = {
        let box = Unmanaged.passRetained(Box())
        g_log_set_default_handler(handler, box.toOpaque())
        return box
    }()

    public static func route(to sink: @escaping Sink) {
        box.takeUnretainedValue().sink.set(sink)
    }

    private static let handler: GLogFunc = { domain, flags, message, context in
        guard let context else { return }
        let box = Unmanaged<Box>.fromOpaque(context).takeUnretainedValue()
        let bits = flags.rawValue
        let level: Level =
            if bits & G_LOG_LEVEL_ERROR.rawValue != 0 { .error }
            else if bits & G_LOG_LEVEL_CRITICAL.rawValue != 0 { .critical }
            else if bits & G_LOG_LEVEL_WARNING.rawValue != 0 { .warning }
            else if bits & G_LOG_LEVEL_MESSAGE.rawValue != 0 { .message }
            else if bits & G_LOG_LEVEL_INFO.rawValue != 0 { .info }
            else { .debug }
        guard let sink = box.sink.value else { return }
        sink(domain.map { String(cString: $0) } ?? "", level, message.map { String(cString: $0) } ?? "")
    }
}
