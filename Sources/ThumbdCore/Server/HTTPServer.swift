internal import CMicroHTTPD
import Foundation
import Glibc
import Logging
import Synchronization

/// libmicrohttpd, internally polled with epoll on a pool of threads. A request that must
/// wait is suspended (`MHD_suspend_connection`) and holds no thread until `respond` resumes it.
public final class HTTPServer: Sendable {
    private let core: ServerCore
    private let daemon: DaemonPointer
    private let loggerBox: LoggerPointer
    private let stopped = Mutex(false)
    /// The port actually bound (useful with port 0).
    public let port: UInt16

    public init(configuration: ServerConfiguration, handler: any HTTPHandler,
                logger: Logger = Logger(label: "thumbd.server")) throws {
        let address = try ListenAddress(parsing: configuration.listen)
        Self.raiseOpenFileLimit()
        let limits = ConnectionGuard.Limits(
            maxConnections: configuration.maxConnections, idleTimeout: .seconds(configuration.idleTimeoutSeconds),
            requestTimeout: .seconds(configuration.requestTimeoutSeconds), maxQueryParameters: ServerConfiguration.maxQueryParameters)
        let core = ServerCore(handler: handler, maxBodyBytes: configuration.maxBodyBytes, limits: limits, logger: logger)
        let retainedCore = Unmanaged.passRetained(core)  // released in stop(), after MHD has stopped
        let loggerBox = LoggerPointer(core: retainedCore.toOpaque())
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue | MHD_USE_TURBO.rawValue
        let started: OpaquePointer? = try Self.withSocketAddress(address) { socketAddress, isIPv6 in
            if isIPv6 { flags |= MHD_USE_IPv6.rawValue }
            return thumbd_mhd_start(
                flags, socketAddress, accessHandler, retainedCore.toOpaque(),
                requestCompleted, retainedCore.toOpaque(), connectionNotified, requestLineSeen, retainedCore.toOpaque(),
                loggerBox.raw,
                UInt32(configuration.threads), UInt32(configuration.maxConnections + ConnectionGuard.headroom),
                UInt32(configuration.listenBacklog), UInt32(configuration.idleTimeoutSeconds),
                configuration.maxRequestBytes)
        }
        guard let started else {
            let reason = String(cString: strerror(errno))
            retainedCore.release()
            loggerBox.free()
            core.watcher.stop()
            core.connections.stop()
            throw ThumbdError(.listenFailed, "cannot listen on \(configuration.listen): \(reason)")
        }
        self.core = core
        self.daemon = DaemonPointer(raw: started)
        self.loggerBox = loggerBox
        self.port = thumbd_mhd_bind_port(started)
    }

    /// Refuses new connections (503 shutting_down, then closed) and new suspensions;
    /// requests already waiting keep waiting. Step one of a graceful shutdown.
    ///
    /// Not `MHD_quiesce_daemon`: with epoll and a thread pool it races the workers, which
    /// remove the listen socket from their epoll sets themselves once they see the daemon
    /// quiesced; the loser of that race gets ENOENT and libmicrohttpd 0.9.75 aborts the
    /// process ("Failed to remove listen FD from epoll set", seen once in 40 runs of the
    /// batch tests). The listen socket stays open until `stop()`, and whoever connects
    /// meanwhile is answered at once and never suspended.
    public func stopAccepting() {
        core.refuseSuspensions()
        core.connections.refuseNewConnections()
    }

    /// Waits until no connection is suspended and every answered request has completed, or
    /// the timeout passes. Returns true when idle.
    public func waitUntilIdle(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if core.isIdle { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return core.isIdle
    }

    /// Stops the daemon. Call after every suspended connection was resumed: libmicrohttpd
    /// aborts the process if one is still suspended.
    public func stop() {
        let first = stopped.withLock { value in
            defer { value = true }
            return !value
        }
        guard first else { return }
        core.refuseSuspensions()
        if !core.waitForNoSuspended(timeout: .seconds(10)) {
            core.logger.critical("server.stop with suspended connections left; they are dropped")
        }
        MHD_stop_daemon(daemon.raw)
        core.watcher.stop()
        core.connections.stop()
        Unmanaged.passUnretained(core).release()  // the retain handed to MHD as `cls`
        loggerBox.free()
    }

    public var suspendedConnections: Int { core.suspendedCount }

    private static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    private static func withSocketAddress<T>(
        _ address: ListenAddress, _ body: (UnsafePointer<sockaddr>, Bool) throws -> T
    ) throws -> T {
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, address.host, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = address.port.bigEndian
            return try withUnsafePointer(to: &v4) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, false) }
            }
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, address.host, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = address.port.bigEndian
            return try withUnsafePointer(to: &v6) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, true) }
            }
        }
        throw ConfigurationError(key: "server.listen", reason: "\(address.host) is not an IP address")
    }
}

/// The daemon handle: created once, stopped once, used by `HTTPServer` only.
private struct DaemonPointer: @unchecked Sendable {
    let raw: OpaquePointer
}

/// The C logger struct handed to MHD; it must outlive the daemon, so it is freed in stop().
private struct LoggerPointer: @unchecked Sendable {
    let raw: UnsafeMutablePointer<thumbd_mhd_logger>

    init(core: UnsafeMutableRawPointer) {
        raw = .allocate(capacity: 1)
        raw.initialize(to: thumbd_mhd_logger(fn: { ctx, message in
            guard let ctx, let message else { return }
            // Mostly clients' mistakes (a header too big, a bad request line): at a bounded rate.
            Unmanaged<ServerCore>.fromOpaque(ctx).takeUnretainedValue().log(mhdMessage: String(cString: message))
        }, ctx: core))
    }

    func free() { raw.deallocate() }
}
