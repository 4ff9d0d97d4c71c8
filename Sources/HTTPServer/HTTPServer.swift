internal import CMicroHTTPD
import Foundation
import Glibc
import Logging
import Support
import Synchronization

/// libmicrohttpd on event loops of ours: one thread per loop, each running a daemon of its own
/// (`MHD_run`, epoll), each accepting from the one listening socket for whichever loop has the
/// fewest connections (`Listener`), and each the one writer of its daemon's sockets
/// (`EventLoop`). A request that must wait is suspended
/// (`MHD_suspend_connection`) and holds no thread until `respond` hands its answer to the loop.
public final class HTTPServer: Sendable {
    public struct Configuration: Sendable {
        public var listen: ListenAddress
        /// Event loops (a thread each, epoll): each writes the sockets it accepted.
        public var threads = 2
        /// Open client connections, idle and suspended included; past it, a 503 and a close.
        public var maxConnections = 10_000
        public var listenBacklog = 4096
        /// An idle keep-alive connection (or one that never sends a request line) is closed after this.
        public var idleTimeout: Duration = .seconds(60)
        /// A request's headers and body must arrive within this of its request line.
        public var requestTimeout: Duration = .seconds(20)
        /// Request line + headers, and libmicrohttpd's per-connection memory pool.
        public var maxRequestBytes = 8 * 1024
        /// A larger request body is refused (413).
        public var maxBodyBytes = 1 << 20
        /// Query parameters one request may carry; more are refused (414).
        public var maxQueryParameters = 64
        /// The request headers copied into `Request.headers` (lower-case names).
        public var requestHeaders: [String] = ["host"]
        /// The `Server` header on every answer (none when nil).
        public var serverHeader: String?
        /// Whether each request's target (path and query) is kept until `finished` (an
        /// access log writes it). Without, an exchange has its `route` only: an open event
        /// stream then does not hold its path for its whole life.
        public var keepsTargets = true

        public init(listen: ListenAddress = .loopback8080) { self.listen = listen }
    }

    private let configuration: Configuration
    private let handler: any HTTPHandler
    private let logger: Logger
    /// Set once by `start()`, read by the rest; nil before it.
    private let running = Slot<Running>()
    private let stopped = Mutex(false)

    /// What a started server holds: its core, its event loops (each with its daemon), the
    /// logger handed to libmicrohttpd, and the port bound.
    private struct Running: Sendable {
        let core: ServerCore
        let loops: [EventLoop]
        let listener: Listener
        let loggerBox: LoggerPointer
    }

    /// The port actually bound (useful with port 0); 0 before `start()`.
    public var port: UInt16 { running.value?.listener.port ?? 0 }

    /// Each event loop's open connections (empty before `start()`): how the loops share the
    /// clients.
    public var connectionsPerLoop: [Int] { running.value?.loops.map(\.load) ?? [] }

    /// A server that listens once started (`start()`): building one binds nothing and
    /// starts no thread, so a daemon can build its parts first and start them in order.
    public init(configuration: Configuration, handler: any HTTPHandler, logger: Logger) {
        self.configuration = configuration
        self.handler = handler
        self.logger = logger
    }

    /// Binds the listen address and starts the event loops; once. Throws when the address
    /// cannot be bound (nothing is left running then).
    public func start() throws(HTTPServerError) {
        guard running.value == nil, !stopped.withLock({ $0 }) else { return }
        let address = configuration.listen
        let configuration = configuration
        let listening = address.ip.withSocketAddress(port: address.port) { socketAddress, length in
            thumbd_listen(socketAddress, length, Int32(configuration.listenBacklog))
        }
        guard listening >= 0 else {
            throw .listenFailed(address: address.description, reason: String(cString: strerror(errno)))
        }
        let core = ServerCore(handler: handler, configuration: configuration, logger: logger)
        let retainedCore = Unmanaged.passRetained(core)  // the logger's; released in stop()
        let loggerBox = LoggerPointer(core: retainedCore.toOpaque())
        var flags = MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue
            | MHD_USE_TURBO.rawValue | MHD_USE_NO_LISTEN_SOCKET.rawValue
        if address.ip.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        var loops: [EventLoop] = []
        for index in 0..<max(1, configuration.threads) {
            let loop = EventLoop(index: index, core: core)
            loops.append(loop)
            let cls = Unmanaged.passUnretained(loop).toOpaque()  // the loops outlive their daemons
            guard let daemon = thumbd_mhd_start(
                flags, accessHandler, cls, requestCompleted, cls, connectionNotified, requestLineSeen, cls,
                loggerBox.raw, UInt32(configuration.maxConnections + ConnectionGuard.headroom),
                UInt32(configuration.idleTimeout.components.seconds), configuration.maxRequestBytes)
            else {
                let reason = String(cString: strerror(errno))
                close(listening)
                Self.stop(loops)
                retainedCore.release()
                loggerBox.free()
                throw .listenFailed(address: address.description, reason: reason)
            }
            loop.attach(daemon)
        }
        let listener = Listener(fd: listening, loops: loops)
        for loop in loops { loop.start(listener) }
        running.set(Running(core: core, loops: loops, listener: listener, loggerBox: loggerBox))
    }

    /// Ends the loops' threads, then stops their daemons (closing what connections are left).
    private static func stop(_ loops: [EventLoop]) {
        for loop in loops { loop.stop() }
        for loop in loops { loop.close() }
    }

    /// Refuses new connections (503 shutting_down, then closed) and new suspensions;
    /// requests already waiting keep waiting. Step one of a graceful shutdown.
    ///
    /// Not `MHD_quiesce_daemon`: the listen socket stays open until `stop()`, and whoever
    /// connects meanwhile is answered at once and never suspended.
    public func stopAccepting() {
        guard let core = running.value?.core else { return }
        core.refuseSuspensions()
        core.connections.refuseNewConnections()
    }

    /// Waits until no connection is suspended and every answered request has completed, or
    /// the timeout passes. Returns true when idle.
    public func waitUntilIdle(timeout: Duration) -> Bool {
        running.value?.core.wait(until: .idle, timeout: timeout) ?? true
    }

    /// Stops the daemon (nothing to do if it never started; once stopped it does not start
    /// again). Call after every suspended connection was resumed: libmicrohttpd aborts the
    /// process if one is still suspended.
    public func stop() {
        let first = stopped.withLock { value in
            defer { value = true }
            return !value
        }
        guard first, let running = running.value else { return }
        let core = running.core
        core.refuseSuspensions()
        if !core.wait(until: .noneSuspended, timeout: .seconds(10)) {
            core.logger.critical("server.stop with suspended connections left; they are dropped")
        }
        Self.stop(running.loops)
        running.listener.close()
        Unmanaged.passUnretained(core).release()  // the logger's retain
        running.loggerBox.free()
    }

    public var suspendedConnections: Int { running.value?.core.suspendedCount ?? 0 }
}

/// What the server could not do.
public enum HTTPServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `HOST:PORT` does not parse, or HOST is not an IP address.
    case badListenAddress(String)
    /// The socket could not be bound (in use, no permission).
    case listenFailed(address: String, reason: String)

    public var description: String {
        switch self {
        case .badListenAddress(let text): "expected IP:PORT or [IPv6]:PORT, got \(text)"
        case .listenFailed(let address, let reason): "cannot listen on \(address): \(reason)"
        }
    }
}

/// A parsed `HOST:PORT` (an IPv4 literal or `localhost`; `[v6]:port` for IPv6).
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16
    public var ip: IPAddress

    public init(parsing text: String) throws(HTTPServerError) {
        var hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            hostPart = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw .badListenAddress(text) }
            portPart = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw .badListenAddress(text) }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        if hostPart == "localhost" { hostPart = "127.0.0.1" }
        guard let port = UInt16(portPart), let ip = IPAddress(String(hostPart)) else { throw .badListenAddress(text) }
        self.host = String(hostPart)
        self.port = port
        self.ip = ip
    }

    public var description: String { ip.isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// 127.0.0.1:8080: loopback only, the port nginx's and many proxies' examples use.
    public static let loopback8080 = ListenAddress(host: "127.0.0.1", port: 8080)

    private init(host: String, port: UInt16) {
        self.host = host
        self.port = port
        ip = IPAddress(bytes: [127, 0, 0, 1])!  // four bytes are always an address
    }
}

/// The C logger struct handed to MHD; it must outlive the daemon, so it is freed in stop().
private struct LoggerPointer: @unchecked Sendable {  // written once before MHD starts, freed once after it stopped
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
