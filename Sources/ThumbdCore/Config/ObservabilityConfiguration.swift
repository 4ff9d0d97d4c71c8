import Configuration
import Logging
import HTTPServer

/// `GET /metrics`. Keys live under `metrics.`.
package struct MetricsConfiguration: Sendable {
    /// `metrics.enabled`: serve `/metrics` at all.
    package var enabled = true
    /// `metrics.listen`: empty (the default) serves `/metrics` beside everything else on
    /// `server.listen`; an address (`127.0.0.1:9464`) serves it there instead, alone, for a
    /// scraper that must not reach the rest of the API.
    package var listen = ""

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "metrics")
        enabled = try r.bool("enabled", enabled)
        listen = r.string("listen", listen)
        try validate()
    }

    /// The separate listener's address, when there is one.
    func listenAddress() throws(ConfigurationError) -> ListenAddress? {
        guard enabled, !listen.isEmpty else { return nil }
        do {
            return try ListenAddress(parsing: listen)
        } catch {
            throw ConfigurationError(key: "metrics.listen", reason: error.description)
        }
    }

    package func validate() throws {
        _ = try listenAddress()
    }
}

/// Logs beyond the daemon's own events. Keys live under `log.`.
package struct LogConfiguration: Sendable {
    /// `log.access`: one line per request (time, method, path without secrets, status,
    /// bytes, cache result, duration, request id) on standard error, label `thumbd.access`.
    package var access = false
    /// `log.level`: trace, debug, info (the default), notice, warning, error or critical.
    package var level = Logger.Level.info
    /// `log.format`: `text` (the default: one line per event, as swift-log prints) or `json`
    /// (one JSON object per line: time, level, label, message and the event's fields, the
    /// request id among them).
    package var format = LogOutput.Format.text
    /// `log.file`: a file the lines are appended to, reopened on SIGHUP (logrotate); empty
    /// (the default): standard error.
    package var file: String?

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "log")
        access = try r.bool("access", access)
        let levelText = r.string("level", level.rawValue)
        guard let level = Logger.Level(rawValue: levelText) else {
            throw ConfigurationError(key: "log.level", reason: "expected one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got \(levelText)")
        }
        self.level = level
        let formatText = r.string("format", format.rawValue)
        guard let format = LogOutput.Format(rawValue: formatText) else {
            throw ConfigurationError(key: "log.format", reason: "expected text or json, got \(formatText)")
        }
        self.format = format
        file = r.optionalString("file")
    }
}
