internal import CMicroHTTPD
import Dispatch
import Foundation
import Logging
import Support
import Synchronization

/// What every event loop of a server shares: the handler, the settings, the connection
/// guard, the counts of suspended and active requests. libmicrohttpd's callbacks reach it
/// through their loop (`cls`).
final class ServerCore: Sendable {
    let handler: any HTTPHandler
    let logger: Logger
    let maxBodyBytes: Int
    let requestHeaders: HeaderNames
    let serverHeader: String?
    let keepsTargets: Bool
    let connections: ConnectionGuard
    private let mhdLog = RateLimitedLog(linesPerWindow: 5, window: .seconds(10))
    private let counts = Mutex(Counts())

    init(handler: any HTTPHandler, configuration: HTTPServer.Configuration, logger: Logger) {
        let limits = ConnectionGuard.Limits(
            maxConnections: configuration.maxConnections, idleTimeout: configuration.idleTimeout,
            requestTimeout: configuration.requestTimeout, maxQueryParameters: configuration.maxQueryParameters)
        self.connections = ConnectionGuard(limits: limits, loops: max(1, configuration.threads), render: handler.render,
                                           refusalID: { [handler] in handler.refusalID() })
        self.handler = handler
        self.maxBodyBytes = configuration.maxBodyBytes
        self.requestHeaders = HeaderNames(configuration.requestHeaders)
        self.serverHeader = configuration.serverHeader
        keepsTargets = configuration.keepsTargets
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

    func didResume() { counts.withLock { $0.suspended -= 1; return $0.reached() }.forEach { $0.signal() } }
    func refuseSuspensions() { counts.withLock { $0.refusing = true } }
    var suspendedCount: Int { counts.withLock { $0.suspended } }

    /// Blocks until `condition` holds or `timeout` passes; woken by the count that reaches
    /// it, not by polling. Returns whether it holds.
    func wait(until condition: Counts.Condition, timeout: Duration) -> Bool {
        let signal = DispatchSemaphore(value: 0)
        let holds = counts.withLock { counts -> Bool in
            if counts.holds(condition) { return true }
            counts.waiters.append((condition, signal))
            return false
        }
        if holds { return true }
        _ = signal.wait(timeout: .now() + timeout.dispatchInterval)
        return counts.withLock { $0.holds(condition) }
    }

    struct Counts {
        enum Condition { case noneSuspended, idle }
        var refusing = false
        var suspended = 0
        var active = 0
        var waiters: [(Condition, DispatchSemaphore)] = []

        func holds(_ condition: Condition) -> Bool {
            switch condition {
            case .noneSuspended: suspended == 0
            case .idle: suspended == 0 && active == 0
            }
        }

        /// Takes the waiters whose condition now holds (signalled outside the lock).
        mutating func reached() -> [DispatchSemaphore] {
            guard !waiters.isEmpty else { return [] }
            let ready = waiters.filter { holds($0.0) }.map(\.1)
            if !ready.isEmpty { waiters = waiters.filter { !holds($0.0) } }
            return ready
        }
    }

    // MARK: Called on the event loops, by MHD

    func access(
        _ connection: OpaquePointer, loop: EventLoop, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        version: UnsafePointer<CChar>?, upload: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>,
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let pointer = slot.pointee else {
            // First call for this request (its headers are in): refuse bad framing at once,
            // with a close; otherwise only record it. Answering now would cost keep-alive.
            if let refusal = Self.framingError(connection, http11: version.map { strcmp($0, "HTTP/1.1") == 0 } ?? false,
                                               maxBodyBytes: maxBodyBytes) {
                return Self.queue(handler.render(refusal), on: connection, core: self, extra: refusalHeaders([("Connection", "close")]))
            }
            let context = RequestContext(connection: connection, loop: loop)
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
            // Refused by the guard while its request line arrived (414, NUL in the path): the
            // answer is written and the socket shut; the request must not run.
            guard connections.processing(thumbd_mhd_connection_fd(connection), loop: loop.index) else { return .NO }
            guard let body = context.takeBody() else {
                return Self.queue(handler.render(.bodyTooLarge(limit: maxBodyBytes)), on: connection, core: self,
                                  extra: refusalHeaders())
            }
            let http11 = version.map { strcmp($0, "HTTP/1.1") == 0 } ?? false
            let request = Request(
                method: method.map { String(cString: $0) } ?? "GET", path: url.map { String(cString: $0) } ?? "/",
                query: Self.queryArguments(connection),
                headers: Self.headers(connection, wanted: requestHeaders), body: body, isHTTP11: http11)
            context.handed(request, route: handler.route(of: request), keepingTarget: keepsTargets)
            switch handler.handle(request, context: context) {
            case .response(let response):
                return Self.queue(response, on: connection, core: self, extra: context.extraHeaders, http11: http11,
                                  context: context)
            case .suspend:
                switch context.suspend() {
                case .suspended: return .YES
                case .alreadyAnswered: break
                case .refused:
                    return Self.queue(handler.render(.shuttingDown), on: connection, core: self, extra: context.extraHeaders,
                                      context: context)
                }
            }
        }
        if let response = context.takeResponse() {
            return Self.queue(response, on: connection, core: self, extra: context.extraHeaders, context: context)
        }
        logger.error("server.access called again without a response")
        return Self.queue(handler.render(.noResponse), on: connection, core: self, extra: refusalHeaders())
    }

    /// The headers of a refusal made before the handler saw the request: its own id.
    private func refusalHeaders(_ more: [(String, String)] = []) -> ExtraHeaders {
        var headers = ExtraHeaders(more)
        if let id = handler.refusalID() { headers.append("X-Request-Id", id) }
        return headers
    }

    func completed(_ connection: OpaquePointer?, loop: EventLoop, _ slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>) {
        if let connection { connections.completed(thumbd_mhd_connection_fd(connection), loop: loop.index) }
        guard let pointer = slot.pointee else { return }
        slot.pointee = nil
        if let exchange = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue().finish() {
            handler.finished(exchange)
        }
        counts.withLock { $0.active -= 1; return $0.reached() }.forEach { $0.signal() }
    }

    /// The buffer libmicrohttpd allocates inside a streamed response, held for the stream's
    /// life: 10,000 open event streams hold 10,000 of them. Over HTTP/1.1 it is not used at
    /// all: a chunked body is read into the connection's own write buffer (its memory
    /// pool), and new events mostly go out by the context's own writes
    /// (`RequestContext+Stream`); such a stream gets one byte (libmicrohttpd takes no
    /// less). Only an HTTP/1.0 stream reads
    /// through it, 256 bytes at a time. 16 KB here was 7 KB of resident memory per stream
    /// (70 MB at 10,000 streams); 256 bytes for every stream was 2.5 MB.
    static let streamBlockBytes = 256
    static let chunkedStreamBlockBytes = 1

    private static func queue(_ response: Response, on connection: OpaquePointer, core: ServerCore,
                              extra: ExtraHeaders = ExtraHeaders(), http11: Bool = false,
                              context: RequestContext? = nil) -> MHD_Result {
        context?.sent(response)
        let mhdResponse: OpaquePointer
        if let stream = response.stream {
            // Streamed: MHD pulls through `readStream` from the request's own context, which
            // the response holds (a retain released in `freeStream`).
            // libmicrohttpd frames a body of unknown length as chunked for every HTTP/1.1
            // request (`Connection: close` included), so the context may write chunks of its
            // own there; no header of ours says so (each header is three allocations held for
            // the stream's life, and 10,000 streams held 10,000 copies).
            guard let context else {
                stream.detach()  // only a handler's answer streams, and it has a context
                return .NO
            }
            context.beginStream(stream, writesDirectly: http11)
            let retained = Unmanaged.passRetained(context)
            guard let created = MHD_create_response_from_callback(
                thumbd_mhd_size_unknown, http11 ? Self.chunkedStreamBlockBytes : Self.streamBlockBytes, readStream,
                retained.toOpaque(), freeStream)
            else {
                retained.release()
                context.closeStream()  // never reached a connection: let its owner forget it
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
        for (name, value) in response.headers { addHeader(mhdResponse, name, value) }
        extra.forEach { name, value in addHeader(mhdResponse, name, value) }
        if let name = core.serverHeader { addHeader(mhdResponse, "Server", name) }
        return MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    }

    /// `withCString` lends the string's own bytes (or, for a short one, a copy on the stack);
    /// passing a String where C wants a pointer would allocate a copy for every header.
    private static func addHeader(_ response: OpaquePointer, _ name: String, _ value: String) {
        name.withCString { name in
            value.withCString { value in _ = MHD_add_response_header(response, name, value) }
        }
    }

    func log(mhdMessage: String) {
        // MHD is given a socket address, so its bind failure names "port 0" whatever the
        // port: the start-up error (`listenFailed`) says what failed instead.
        if mhdMessage.hasPrefix("Failed to bind to port") { return }
        mhdLog.run { suppressed in
            logger.notice("microhttpd", metadata: [
                "mhd.message": "\(mhdMessage.trimmingCharacters(in: .whitespacesAndNewlines))",
                "log.suppressed": "\(suppressed)",
            ])
        }
    }
}

/// The callbacks borrow their event loop (`_withUnsafeGuaranteedRef`: the loops outlive their
/// daemons) and its core, without a retain and release of either: the core is shared by every
/// loop, and its reference count bounced between their cores on each callback of each request.
let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, version, upload, uploadSize, slot in
    Unmanaged<EventLoop>.fromOpaque(cls!)._withUnsafeGuaranteedRef { loop in
        loop.core.access(connection!, loop: loop, url: url, method: method, version: version, upload: upload,
                         uploadSize: uploadSize!, slot: slot!)
    }
}

/// Frees a response body handed to MHD: the one retain taken in `queue`.
private let releaseBody: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    Unmanaged<Bytes>.fromOpaque(cls).release()
}

let requestCompleted: MHD_RequestCompletedCallback = { cls, connection, slot, _ in
    guard let cls, let slot else { return }
    Unmanaged<EventLoop>.fromOpaque(cls)._withUnsafeGuaranteedRef { loop in loop.core.completed(connection, loop: loop, slot) }
}

let connectionNotified: MHD_NotifyConnectionCallback = { cls, connection, _, event in
    guard let cls, let connection else { return }
    let fd = thumbd_mhd_connection_fd(connection)
    guard fd >= 0 else { return }
    let loop = Unmanaged<EventLoop>.fromOpaque(cls).takeUnretainedValue()
    if event == .CONNECTION_NOTIFY_STARTED {
        loop.connectionStarted()
        loop.core.connections.started(fd, loop: loop.index)
    } else {
        loop.connectionClosed()
        loop.core.connections.closed(fd, loop: loop.index)
    }
}

/// MHD's URI log callback: called with the request line's target before its query is parsed.
/// Returns nil, so the first access-handler call still sees no request state.
let requestLineSeen: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = {
    cls, uri, connection in
    guard let cls, let uri, let connection else { return nil }
    let fd = thumbd_mhd_connection_fd(connection)
    guard fd >= 0 else { return nil }
    Unmanaged<EventLoop>.fromOpaque(cls)._withUnsafeGuaranteedRef { loop in
        loop.core.connections.requestLine(fd, loop: loop.index, uri: uri)
    }
    return nil
}
