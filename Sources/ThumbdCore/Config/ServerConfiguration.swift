import Configuration
import HTTPServer

/// The server's own defaults: each setting below that the server uses starts from it, so a
/// default is written once, where the value is used.
private let serverDefaults = HTTPServer.Configuration()

/// How thumbd listens and how many connections it holds. Keys live under `server.`.
package struct ServerConfiguration: Sendable {
    /// `server.listen`: HOST:PORT to listen on. Port 0 picks a free port (tests).
    package var listen = serverDefaults.listen.description
    /// `server.threads`: event loops (a thread each running one libmicrohttpd daemon on epoll).
    package var threads = serverDefaults.threads
    /// `server.maxConnections`: open client connections, idle and suspended included.
    package var maxConnections = serverDefaults.maxConnections
    /// `server.listenBacklog`: kernel accept queue length.
    package var listenBacklog = serverDefaults.listenBacklog
    /// `server.idleTimeoutSeconds`: an idle keep-alive connection is closed after this.
    package var idleTimeoutSeconds = Int(serverDefaults.idleTimeout / .seconds(1))
    /// `server.requestTimeoutSeconds`: a request's headers and body must arrive within this
    /// of its request line (a client trickling bytes is closed with 408). Before the request
    /// line, `idleTimeoutSeconds` applies, whatever the client sends.
    package var requestTimeoutSeconds = Int(serverDefaults.requestTimeout / .seconds(1))
    /// Query parameters one request may carry; more get 414 (libmicrohttpd keeps a record
    /// per parameter in the connection pool, which `maxRequestBytes` bounds).
    package static let maxQueryParameters = serverDefaults.maxQueryParameters
    /// `server.maxRequestBytes`: request line + headers; a longer URL gets 414. It is also
    /// libmicrohttpd's per-connection memory pool, which it zeroes for every request and
    /// which every open event stream holds: 8 KB (twice the URL limit) instead of 32 KB
    /// was measured faster on hits and 40 MB smaller at 10,000 streams.
    package var maxRequestBytes = serverDefaults.maxRequestBytes
    /// `server.maxBodyBytes`: a request body larger than this is refused with 413.
    package var maxBodyBytes = serverDefaults.maxBodyBytes
    /// `server.shutdownGraceSeconds`: on SIGTERM, in-flight fetches get this long to finish.
    package var shutdownGraceSeconds = 5.0

    /// `server.allowedHosts`: host names (besides loopback names and the listen address)
    /// that requests may carry in `Host`; others get 421 (DNS rebinding). `*` allows any.
    package var allowedHosts: [String] = []
    /// `server.allowedOrigins`: web origins (`https://app.example`) that may POST/DELETE
    /// cross-origin and get CORS headers; other foreign origins get 403 on those.
    package var allowedOrigins: [String] = []

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "server")
        listen = r.string("listen", listen)
        threads = try r.int("threads", threads)
        maxConnections = try r.int("maxConnections", maxConnections)
        listenBacklog = try r.int("listenBacklog", listenBacklog)
        idleTimeoutSeconds = try r.int("idleTimeoutSeconds", idleTimeoutSeconds)
        requestTimeoutSeconds = try r.int("requestTimeoutSeconds", requestTimeoutSeconds)
        maxRequestBytes = try r.int("maxRequestBytes", maxRequestBytes)
        maxBodyBytes = try r.int("maxBodyBytes", maxBodyBytes)
        shutdownGraceSeconds = try r.double("shutdownGraceSeconds", shutdownGraceSeconds)
        allowedHosts = r.strings("allowedHosts", allowedHosts)
        allowedOrigins = r.strings("allowedOrigins", allowedOrigins)
        try validate()
    }

    /// `listen`, parsed.
    package func listenAddress() throws(ConfigurationError) -> ListenAddress {
        do {
            return try ListenAddress(parsing: listen)
        } catch {
            throw ConfigurationError(key: "server.listen", reason: error.description)
        }
    }

    /// The request headers the handlers read: looked up by name, not all copied (copying
    /// every header into a dictionary was a visible share of a hit's cost).
    static let requestHeaders = [
        "host", "if-none-match", "if-modified-since", "accept", "last-event-id", "content-type", "content-length", "origin", "x-request-id",
    ]

    /// The server's own settings, in its terms.
    func httpServer() throws -> HTTPServer.Configuration {
        var server = HTTPServer.Configuration(listen: try listenAddress())
        server.threads = threads
        server.maxConnections = maxConnections
        server.listenBacklog = listenBacklog
        server.idleTimeout = .seconds(idleTimeoutSeconds)
        server.requestTimeout = .seconds(requestTimeoutSeconds)
        server.maxRequestBytes = maxRequestBytes
        server.maxBodyBytes = maxBodyBytes
        server.maxQueryParameters = Self.maxQueryParameters
        server.requestHeaders = Self.requestHeaders
        server.serverHeader = "thumbd"
        return server
    }

    package func validate() throws {
        _ = try listenAddress()
        try require((1...64).contains(threads), "server.threads", "must be 1...64, got \(threads)")
        try require(maxConnections >= 16, "server.maxConnections", "must be at least 16")
        try require(listenBacklog >= 1, "server.listenBacklog", "must be positive")
        try require(idleTimeoutSeconds >= 1, "server.idleTimeoutSeconds", "must be positive")
        try require(requestTimeoutSeconds >= 1, "server.requestTimeoutSeconds", "must be positive")
        try require(maxRequestBytes >= 4096, "server.maxRequestBytes", "must be at least 4096")
        try require(maxBodyBytes >= 1024, "server.maxBodyBytes", "must be at least 1024")
        try require(shutdownGraceSeconds >= 0, "server.shutdownGraceSeconds", "must not be negative")
        for host in allowedHosts {
            try require(!host.isEmpty && !host.contains("/") && !host.contains(" "), "server.allowedHosts", "bad host name \(host)")
        }
        for origin in allowedOrigins {
            try require((origin.hasPrefix("http://") || origin.hasPrefix("https://")) && !origin.dropFirst(8).contains("/"),
                        "server.allowedOrigins", "expected scheme://host[:port], got \(origin)")
        }
    }
}
