import Configuration
import Upstream

/// The transfer loop's own defaults: each setting below that the loop uses starts from it,
/// so a default is written once, where the value is used.
private let loopDefaults = TransferLoop.Configuration()

/// How thumbd talks to origins. Keys live under `upstream.`.
package struct UpstreamConfiguration: Sendable {
    /// `upstream.threads`: transfer loops, each a thread with its own curl multi handle
    /// and connections; the limits below are shared out among them (see `TransferLoops`).
    package var threads = 2
    /// `upstream.maxConcurrent`: transfers running at once, all hosts together.
    package var maxConcurrent = loopDefaults.maxConcurrent
    /// `upstream.maxPerHost`: a politeness cap on transfers running at once to one host;
    /// 0 (the default) for none beyond `maxConnectionsPerHost`.
    package var maxPerHost = loopDefaults.maxPerHost
    /// `upstream.maxConnectionsPerHost`: connections open at once to one host. Over
    /// HTTP/1.1 that is the transfers running to it; HTTP/2 origins multiplex many
    /// transfers over one connection.
    package var maxConnectionsPerHost = loopDefaults.maxConnectionsPerHost
    /// `upstream.maxQueued`: fetches waiting for a slot; past this a new fetch gets 503 at once.
    package var maxQueued = loopDefaults.maxQueued
    /// `upstream.connectTimeoutMilliseconds`: TCP + TLS connect.
    package var connectTimeoutMilliseconds = loopDefaults.connectTimeoutMilliseconds
    /// `upstream.timeoutMilliseconds`: the whole transfer, redirects included.
    package var timeoutMilliseconds = loopDefaults.timeoutMilliseconds
    /// `upstream.lowSpeedBytesPerSecond` / `upstream.lowSpeedSeconds`: abort a transfer
    /// slower than this for this long.
    package var lowSpeedBytesPerSecond = loopDefaults.lowSpeedBytesPerSecond
    package var lowSpeedSeconds = loopDefaults.lowSpeedSeconds
    /// `upstream.maxObjectBytes`: a larger body is refused (502), checked while it streams in.
    package var maxObjectBytes = loopDefaults.maxObjectBytes
    /// `upstream.maxRedirects`: redirects followed before giving up (502).
    package var maxRedirects = loopDefaults.maxRedirects
    /// `upstream.maxBufferedBytes`: memory all downloaded bodies hold together, from their
    /// first byte until freed; past it transfers wait (paused) for memory.
    package var maxBufferedBytes = loopDefaults.maxBufferedBytes
    /// `upstream.allowPrivateNetworks`: allow loopback, private, link-local and multicast
    /// destinations. Off by default: thumbd must not become a way into the local network.
    package var allowPrivateNetworks = false
    /// `upstream.allowHosts`: if not empty, only these hosts (`example.org`, `*.example.org`).
    package var allowHosts: [String] = []
    /// `upstream.abortWhenAbandoned`: abort a transfer when its last waiter has gone.
    package var abortWhenAbandoned = true
    /// `upstream.userAgent`: the User-Agent sent to origins: `thumbd/` and the release.
    package var userAgent = "thumbd/" + BuildInfo.version
    /// `upstream.caFile`: a PEM file of certificate authorities to trust for https origins
    /// instead of the system's. Verification itself cannot be turned off.
    package var caFile: String?
    /// `upstream.proxy`: an HTTP proxy every fetch goes through, e.g. a Varnish or nginx
    /// parent cache shared by many machines (`http://cache.internal:6081`).
    package var proxy: String?

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "upstream")
        threads = try r.int("threads", threads)
        maxConcurrent = try r.int("maxConcurrent", maxConcurrent)
        maxPerHost = try r.int("maxPerHost", maxPerHost)
        maxConnectionsPerHost = try r.int("maxConnectionsPerHost", maxConnectionsPerHost)
        maxQueued = try r.int("maxQueued", maxQueued)
        connectTimeoutMilliseconds = try r.int("connectTimeoutMilliseconds", connectTimeoutMilliseconds)
        timeoutMilliseconds = try r.int("timeoutMilliseconds", timeoutMilliseconds)
        lowSpeedBytesPerSecond = try r.int("lowSpeedBytesPerSecond", lowSpeedBytesPerSecond)
        lowSpeedSeconds = try r.int("lowSpeedSeconds", lowSpeedSeconds)
        maxObjectBytes = try r.int("maxObjectBytes", maxObjectBytes)
        maxRedirects = try r.int("maxRedirects", maxRedirects)
        maxBufferedBytes = try r.int("maxBufferedBytes", maxBufferedBytes)
        allowPrivateNetworks = try r.bool("allowPrivateNetworks", allowPrivateNetworks)
        allowHosts = r.strings("allowHosts", allowHosts)
        abortWhenAbandoned = try r.bool("abortWhenAbandoned", abortWhenAbandoned)
        userAgent = r.string("userAgent", userAgent)
        caFile = r.optionalString("caFile")
        proxy = r.optionalString("proxy")
        try validate()
    }

    /// The transfer loop's settings, with the destination policy as its connect check.
    func transferLoop(policy: DestinationPolicy) -> TransferLoop.Configuration {
        var loop = TransferLoop.Configuration()
        loop.maxConcurrent = maxConcurrent
        loop.maxPerHost = maxPerHost
        loop.maxConnectionsPerHost = maxConnectionsPerHost
        loop.caFile = caFile
        loop.proxy = proxy
        loop.maxQueued = maxQueued
        loop.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        loop.timeoutMilliseconds = timeoutMilliseconds
        loop.lowSpeedBytesPerSecond = lowSpeedBytesPerSecond
        loop.lowSpeedSeconds = lowSpeedSeconds
        loop.maxObjectBytes = maxObjectBytes
        loop.maxRedirects = maxRedirects
        loop.maxBufferedBytes = maxBufferedBytes
        loop.userAgent = userAgent
        loop.connectCheck = policy.connectCheck
        return loop
    }

    package func validate() throws {
        try require((1...64).contains(threads), "upstream.threads", "must be 1...64, got \(threads)")
        try require(maxConcurrent >= 1, "upstream.maxConcurrent", "must be positive")
        try require(maxPerHost >= 0, "upstream.maxPerHost", "must not be negative (0: no cap)")
        try require(maxConnectionsPerHost >= 1, "upstream.maxConnectionsPerHost", "must be positive")
        if let proxy {
            try require(proxy.hasPrefix("http://") && proxy.count > 7 && !proxy.contains(where: { $0.isWhitespace }),
                        "upstream.proxy", "must be an http:// URL")
        }
        try require(maxQueued >= 0, "upstream.maxQueued", "must not be negative")
        try require(connectTimeoutMilliseconds >= 1, "upstream.connectTimeoutMilliseconds", "must be positive")
        try require(timeoutMilliseconds >= 1, "upstream.timeoutMilliseconds", "must be positive")
        try require(lowSpeedBytesPerSecond >= 0 && lowSpeedSeconds >= 0, "upstream.lowSpeed*", "must not be negative")
        try require(maxObjectBytes >= 1024, "upstream.maxObjectBytes", "must be at least 1024")
        try require((0...50).contains(maxRedirects), "upstream.maxRedirects", "must be 0...50")
        try require(maxBufferedBytes >= 1 << 20, "upstream.maxBufferedBytes", "must be at least 1048576 (1 MiB)")
        for host in allowHosts {
            try require(!host.isEmpty && !host.contains("/"), "upstream.allowHosts", "bad host pattern \(host)")
        }
    }
}
