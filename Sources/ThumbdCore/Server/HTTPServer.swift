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
        let core = ServerCore(handler: handler, maxBodyBytes: configuration.maxBodyBytes, logger: logger)
        let retainedCore = Unmanaged.passRetained(core)  // released in stop(), after MHD has stopped
        let loggerBox = LoggerPointer(core: retainedCore.toOpaque())
        var flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue | MHD_USE_TURBO.rawValue
        let started: OpaquePointer? = try Self.withSocketAddress(address) { socketAddress, isIPv6 in
            if isIPv6 { flags |= MHD_USE_IPv6.rawValue }
            return thumbd_mhd_start(
                flags, socketAddress, accessHandler, retainedCore.toOpaque(),
                requestCompleted, retainedCore.toOpaque(), loggerBox.raw,
                UInt32(configuration.threads), UInt32(configuration.maxConnections),
                UInt32(configuration.listenBacklog), UInt32(configuration.idleTimeoutSeconds),
                configuration.maxRequestBytes)
        }
        guard let started else {
            let reason = String(cString: strerror(errno))
            retainedCore.release()
            loggerBox.free()
            core.watcher.stop()
            throw ThumbdError(status: 500, code: "listen_failed", message: "cannot listen on \(configuration.listen): \(reason)")
        }
        self.core = core
        self.daemon = DaemonPointer(raw: started)
        self.loggerBox = loggerBox
        self.port = thumbd_mhd_bind_port(started)
    }

    /// Stops accepting connections and refuses new suspensions; requests already waiting
    /// keep waiting. Step one of a graceful shutdown.
    public func stopAccepting() {
        core.refuseSuspensions()
        let listener = MHD_quiesce_daemon(daemon.raw)
        if listener >= 0 { close(listener) }
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

/// What libmicrohttpd's callbacks reach through their `cls` pointer.
final class ServerCore: Sendable {
    let handler: any HTTPHandler
    let watcher = DisconnectWatcher()
    let logger: Logger
    let maxBodyBytes: Int
    private let counts = Mutex<(refusing: Bool, suspended: Int, active: Int)>((false, 0, 0))

    init(handler: any HTTPHandler, maxBodyBytes: Int, logger: Logger) {
        self.handler = handler
        self.maxBodyBytes = maxBodyBytes
        self.logger = logger
    }

    var isRefusing: Bool { counts.withLock { $0.refusing } }

    /// Counts a suspension, unless shutdown has begun. Checked and counted under one lock,
    /// so shutdown can never miss a suspension that slipped in after it looked.
    func beginSuspension() -> Bool {
        counts.withLock { counts in
            guard !counts.refusing else { return false }
            counts.suspended += 1
            return true
        }
    }

    func didResume() { counts.withLock { $0.suspended -= 1 } }
    func refuseSuspensions() { counts.withLock { $0.refusing = true } }
    var suspendedCount: Int { counts.withLock { $0.suspended } }
    var isIdle: Bool { counts.withLock { $0.suspended == 0 && $0.active == 0 } }

    func waitForNoSuspended(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while suspendedCount > 0 {
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return true
    }

    // MARK: Called on MHD threads

    func access(
        _ connection: OpaquePointer, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let pointer = slot.pointee else {
            // First call for this request: only record it. Answering now would cost keep-alive.
            let context = RequestContext(connection: connection, server: self)
            slot.pointee = Unmanaged.passRetained(context).toOpaque()  // released in requestCompleted
            counts.withLock { $0.active += 1 }
            return .YES
        }
        let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
        if uploadSize.pointee != 0 {
            if let upload { context.appendBody(UnsafeRawBufferPointer(start: upload, count: uploadSize.pointee), limit: maxBodyBytes) }
            uploadSize.pointee = 0
            return .YES
        }
        if context.start() {
            guard let body = context.takeBody() else {
                return Self.queue(.error(ThumbdError(status: 413, code: "body_too_large",
                                                     message: "the request body is larger than \(maxBodyBytes) bytes")),
                                  on: connection, core: self)
            }
            let request = Request(
                method: method.map { String(cString: $0) } ?? "GET", path: url.map { String(cString: $0) } ?? "/",
                query: Self.values(connection, kind: .GET_ARGUMENT_KIND, lowercased: false),
                headers: Self.headers(connection), body: body)
            switch handler.handle(request, context: context) {
            case .response(let response):
                return Self.queue(response, on: connection, core: self)
            case .suspend:
                switch context.suspend() {
                case .suspended: return .YES
                case .alreadyAnswered: break
                case .refused: return Self.queue(.error(.shuttingDown), on: connection, core: self)
                }
            }
        }
        if let response = context.takeResponse() {
            return Self.queue(response, on: connection, core: self)
        }
        logger.error("server.access called again without a response")
        return Self.queue(.error(ThumbdError(status: 500, code: "internal", message: "no response")), on: connection, core: self)
    }

    func completed(_ slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        guard let pointer = slot.pointee else { return }
        slot.pointee = nil
        Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue().finish()
        counts.withLock { $0.active -= 1 }
    }

    private static func queue(_ response: Response, on connection: OpaquePointer, core: ServerCore) -> MHD_Result {
        let mhdResponse: OpaquePointer
        if let stream = response.stream {
            // Streamed: MHD pulls through `readStream`; the box is released in `freeStream`.
            let box = Unmanaged.passRetained(StreamBox(stream: stream, connection: connection, core: core))
            guard let created = MHD_create_response_from_callback(
                thumbd_mhd_size_unknown, 16 * 1024, readStream, box.toOpaque(), freeStream)
            else {
                box.release()
                return .NO
            }
            mhdResponse = created
        } else {
            // No copy: MHD sends from the body's own memory and releases our retain when done.
            let body = Unmanaged.passRetained(response.body)
            guard let created = MHD_create_response_from_buffer_with_free_callback_cls(
                response.body.count, UnsafeMutableRawPointer(mutating: response.body.baseAddress), releaseBody, body.toOpaque())
            else {
                body.release()
                return .NO
            }
            mhdResponse = created
        }
        defer { MHD_destroy_response(mhdResponse) }
        for (name, value) in response.headers {
            _ = MHD_add_response_header(mhdResponse, name, value)
        }
        _ = MHD_add_response_header(mhdResponse, "Server", "thumbd")
        return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    }

    /// The request headers handlers use, looked up by name rather than all copied: copying
    /// every header into a dictionary was a visible share of a hit's cost.
    static let headerNames = ["if-none-match", "accept", "last-event-id", "content-type", "content-length", "origin"]

    private static func headers(_ connection: OpaquePointer) -> [String: String] {
        var headers: [String: String] = [:]
        for name in headerNames {
            if let value = MHD_lookup_connection_value(connection, .HEADER_KIND, name) {
                headers[name] = String(cString: value)
            }
        }
        return headers
    }

    private static func values(_ connection: OpaquePointer, kind: MHD_ValueKind, lowercased: Bool) -> [String: String] {
        let collector = ValueCollector(lowercased: lowercased)
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
                guard let cls, let key else { return .YES }
                let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
                collector.add(String(cString: key), value.map { String(cString: $0) } ?? "")
                return .YES
            }, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.values
    }
}

private final class ValueCollector {
    var values: [String: String] = [:]
    let lowercased: Bool
    init(lowercased: Bool) { self.lowercased = lowercased }
    func add(_ key: String, _ value: String) {
        let name = lowercased ? key.lowercased() : key
        if values[name] == nil { values[name] = value }  // the first occurrence wins
    }
}

private let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, _, upload, uploadSize, slot in
    let core = Unmanaged<ServerCore>.fromOpaque(cls!).takeUnretainedValue()
    return core.access(connection!, url: url, method: method, upload: upload, uploadSize: uploadSize!, slot: slot!)
}

/// Frees a response body handed to MHD: the one retain taken in `queue`.
private let releaseBody: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    Unmanaged<Bytes>.fromOpaque(cls).release()
}

private let requestCompleted: MHD_RequestCompletedCallback = { cls, _, slot, _ in
    guard let cls, let slot else { return }
    Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().completed(slot)
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
            let core = Unmanaged<ServerCore>.fromOpaque(ctx).takeUnretainedValue()
            core.logger.warning("microhttpd", metadata: ["mhd.message": "\(String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines))"])
        }, ctx: core))
    }

    func free() { raw.deallocate() }
}
