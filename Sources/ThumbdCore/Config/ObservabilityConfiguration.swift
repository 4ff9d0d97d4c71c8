public import Configuration
import HTTPServer

/// `GET /metrics`. Keys live under `metrics.`.
public struct MetricsConfiguration: Sendable {
    /// `metrics.enabled`: serve `/metrics` at all.
    public var enabled = true
    /// `metrics.listen`: empty (the default) serves `/metrics` beside everything else on
    /// `server.listen`; an address (`127.0.0.1:9464`) serves it there instead, alone, for a
    /// scraper that must not reach the rest of the API.
    public var listen = ""

    public init() {}

    public init(reader: ConfigReader) throws {
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

    public func validate() throws {
        _ = try listenAddress()
    }
}

/// Logs beyond the daemon's own events. Keys live under `log.`.
public struct LogConfiguration: Sendable {
    /// `log.access`: one line per request (time, method, path without secrets, status,
    /// bytes, cache result, duration, request id) on standard error, label `thumbd.access`.
    public var access = false

    public init() {}

    public init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "log")
        access = try r.bool("access", access)
    }
}
