public import Configuration
import Upstream

/// How thumbd talks to origins. Keys live under `upstream.`.
public struct UpstreamConfiguration: Sendable {
    /// `upstream.maxConcurrent`: transfers running at once, all hosts together.
    public var maxConcurrent = 64
    /// `upstream.maxPerHost`: transfers running at once to one host.
    public var maxPerHost = 8
    /// `upstream.maxQueued`: fetches waiting for a slot; past this a new fetch gets 503 at once.
    public var maxQueued = 10_000
    /// `upstream.connectTimeoutMilliseconds`: TCP + TLS connect.
    public var connectTimeoutMilliseconds = 5_000
    /// `upstream.timeoutMilliseconds`: the whole transfer, redirects included.
    public var timeoutMilliseconds = 30_000
    /// `upstream.lowSpeedBytesPerSecond` / `upstream.lowSpeedSeconds`: abort a transfer
    /// slower than this for this long.
    public var lowSpeedBytesPerSecond = 1_024
    public var lowSpeedSeconds = 10
    /// `upstream.maxObjectBytes`: a larger body is refused (502), checked while it streams in.
    public var maxObjectBytes = 20 << 20
    /// `upstream.maxRedirects`: redirects followed before giving up (502).
    public var maxRedirects = 5
    /// `upstream.allowPrivateNetworks`: allow loopback, private, link-local and multicast
    /// destinations. Off by default: thumbd must not become a way into the local network.
    public var allowPrivateNetworks = false
    /// `upstream.allowHosts`: if not empty, only these hosts (`example.org`, `*.example.org`).
    public var allowHosts: [String] = []
    /// `upstream.abortWhenAbandoned`: abort a transfer when its last waiter has gone.
    public var abortWhenAbandoned = true
    /// `upstream.userAgent`: the User-Agent sent to origins.
    public var userAgent = "thumbd/0.1 (+https://github.com/thumbd)"

    public init() {}

    public init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "upstream")
        maxConcurrent = try r.int("maxConcurrent", maxConcurrent)
        maxPerHost = try r.int("maxPerHost", maxPerHost)
        maxQueued = try r.int("maxQueued", maxQueued)
        connectTimeoutMilliseconds = try r.int("connectTimeoutMilliseconds", connectTimeoutMilliseconds)
        timeoutMilliseconds = try r.int("timeoutMilliseconds", timeoutMilliseconds)
        lowSpeedBytesPerSecond = try r.int("lowSpeedBytesPerSecond", lowSpeedBytesPerSecond)
        lowSpeedSeconds = try r.int("lowSpeedSeconds", lowSpeedSeconds)
        maxObjectBytes = try r.int("maxObjectBytes", maxObjectBytes)
        maxRedirects = try r.int("maxRedirects", maxRedirects)
        allowPrivateNetworks = try r.bool("allowPrivateNetworks", allowPrivateNetworks)
        allowHosts = r.strings("allowHosts", allowHosts)
        abortWhenAbandoned = try r.bool("abortWhenAbandoned", abortWhenAbandoned)
        userAgent = r.string("userAgent", userAgent)
        try validate()
    }

    /// The transfer loop's settings, with the destination policy as its connect check.
    func transferLoop(policy: DestinationPolicy) -> TransferLoop.Configuration {
        var loop = TransferLoop.Configuration()
        loop.maxConcurrent = maxConcurrent
        loop.maxPerHost = maxPerHost
        loop.maxQueued = maxQueued
        loop.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        loop.timeoutMilliseconds = timeoutMilliseconds
        loop.lowSpeedBytesPerSecond = lowSpeedBytesPerSecond
        loop.lowSpeedSeconds = lowSpeedSeconds
        loop.maxObjectBytes = maxObjectBytes
        loop.maxRedirects = maxRedirects
        loop.userAgent = userAgent
        loop.connectCheck = policy.connectCheck
        return loop
    }

    public func validate() throws {
        try require(maxConcurrent >= 1, "upstream.maxConcurrent", "must be positive")
        try require(maxPerHost >= 1, "upstream.maxPerHost", "must be positive")
        try require(maxQueued >= 0, "upstream.maxQueued", "must not be negative")
        try require(connectTimeoutMilliseconds >= 1, "upstream.connectTimeoutMilliseconds", "must be positive")
        try require(timeoutMilliseconds >= 1, "upstream.timeoutMilliseconds", "must be positive")
        try require(lowSpeedBytesPerSecond >= 0 && lowSpeedSeconds >= 0, "upstream.lowSpeed*", "must not be negative")
        try require(maxObjectBytes >= 1024, "upstream.maxObjectBytes", "must be at least 1024")
        try require((0...50).contains(maxRedirects), "upstream.maxRedirects", "must be 0...50")
        for host in allowHosts {
            try require(!host.isEmpty && !host.contains("/"), "upstream.allowHosts", "bad host pattern \(host)")
        }
    }
}
