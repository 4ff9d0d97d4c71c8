import Support
internal import CMicroHTTPD
import Synchronization

/// One request's life on a connection: answered at once, or suspended until `respond` is
/// called from any thread; and when the answer is a stream, that stream's reader and the one
/// holder of its suspension (`RequestContext+Stream.swift`). Whatever another thread gives it
/// (the answer, a stream's new events) is handed to the connection's event loop, which alone
/// resumes the connection and writes its socket (`runOnLoop`). Owned by libmicrohttpd through
/// `req_cls` (one retain, released in the request-completed callback), and for a stream also
/// through the response (a second retain, released when MHD frees it).
///
/// One object per request, whichever way it is answered: 10,000 open event streams hold
/// 10,000 of them, so it carries no more than the request needs.
public final class RequestContext: Sendable, StreamWaker {
    /// Swift lays a struct out in the order written: the flags sit together at the end.
    /// Every open event stream holds one of these, so each field is as small as it can be.
    struct State {
        /// What waits to go out: an answer given by `respond` while suspended, until MHD
        /// takes it (boxed: the rest of the request's life does not carry its room); then,
        /// for a streamed answer, its source, until MHD frees the response. Never both: one
        /// field for the two (`response`, `stream`), one word less for every open stream.
        var outgoing = Outgoing.none
        var goneHandlers: [@Sendable () -> Void] = []
        /// The request's body while it arrives (taken before the handler runs); then, for a
        /// streamed answer, the unsent end of a chunk it framed itself (`pending`). Never
        /// both at once.
        var buffer: [UInt8] = []
        var extraHeaders = ExtraHeaders()
        /// What `finished` reports: the request as the handler saw it, and what was sent
        /// (with the extra headers, always sent with it).
        var request: (method: String, path: String, query: Fields)?
        /// The event loop's watch of this connection's socket; 0: not watched.
        var watchToken: UInt64 = 0
        var sent: (headers: [(String, String)], bytes: Int?, status: Int16)?
        /// The handler's route for the request (`HTTPHandler.route(of:)`).
        var route: Int16 = 0
        var flags: Flags = []

        /// The flags, read and set as `flags[.suspended]`.
        struct Flags: OptionSet {
            let rawValue: UInt16
            static let started = Flags(rawValue: 1 << 0)
            /// Suspended by us: waiting for `respond`, or a stream waiting for something to send.
            static let suspended = Flags(rawValue: 1 << 1)
            static let finished = Flags(rawValue: 1 << 2)
            static let bodyTooLarge = Flags(rawValue: 1 << 3)
            /// The stream may write chunks of its own while suspended (HTTP/1.1: chunked).
            static let writesDirectly = Flags(rawValue: 1 << 4)
            /// MHD has freed the stream's response.
            static let closed = Flags(rawValue: 1 << 5)
            /// The stream's client hung up.
            static let gone = Flags(rawValue: 1 << 6)
            /// The stream's socket is watched (once, for the stream's life).
            static let watching = Flags(rawValue: 1 << 7)
            /// Waits in the event loop's queue (`schedule`): queued at most once.
            static let queued = Flags(rawValue: 1 << 8)
            /// `respond` gave the answer to a suspended request: the loop resumes it.
            static let resumeDue = Flags(rawValue: 1 << 9)

            subscript(member: Flags) -> Bool {
                get { contains(member) }
                set { if newValue { insert(member) } else { remove(member) } }
            }
        }

        /// The unsent end of a chunk the stream framed itself. While there is one, the
        /// connection stays suspended and waits for room to write.
        var pending: [UInt8] {
            get { buffer }
            set { buffer = newValue }
        }

        enum Outgoing {
            case none
            case answer(Answer)
            case stream(any ResponseStream)
        }

        /// An answer given while suspended, not yet taken.
        var response: Answer? {
            get { if case .answer(let answer) = outgoing { answer } else { nil } }
            set {
                if let newValue { outgoing = .answer(newValue) } else if case .answer = outgoing { outgoing = .none }
            }
        }

        /// A streamed answer's source, from its queueing until MHD frees the response.
        var stream: (any ResponseStream)? {
            get { if case .stream(let stream) = outgoing { stream } else { nil } }
            set {
                if let newValue { outgoing = .stream(newValue) } else if case .stream = outgoing { outgoing = .none }
            }
        }
    }

    /// When the request's headers were in.
    let started = ContinuousClock.now

    let state = Mutex(State())
    /// The MHD connection: used on its event loop's thread only.
    let connection: ConnectionPointer
    /// The connection's event loop: its one writer.
    let loop: EventLoop
    /// Reached through the loop, which holds it: a reference of the context's own (even
    /// unowned) was two atomic operations a request on the one object every loop shares.
    var server: ServerCore { loop.core }

    final class Answer: Sendable {
        let response: Response
        init(_ response: Response) { self.response = response }
    }

    init(connection: OpaquePointer, loop: EventLoop) {
        self.connection = ConnectionPointer(raw: connection)
        self.loop = loop
    }

    /// Delivers the response, from any thread: the connection's loop resumes it and sends
    /// it. The first call wins; later ones are ignored.
    public func respond(_ response: Response) {
        let due = state.withLock { state -> Bool in
            // Once an answer is queued (a stream's too), nothing replaces it.
            guard state.response == nil, state.sent == nil, !state.flags[.finished] else { return false }
            state.response = Answer(response)
            guard state.flags[.suspended] else { return false }  // the loop will pick it up itself
            state.flags[.suspended] = false
            state.flags[.resumeDue] = true
            return true
        }
        if due { schedule() }
    }

    /// Hands this context to its loop, unless it waits there already (after the lock: the
    /// loop's queue has a lock of its own).
    func schedule() {
        let first = state.withLock { state in
            defer { state.flags[.queued] = true }
            return !state.flags[.queued]
        }
        if first { loop.schedule(self) }
    }

    /// On the loop, its turn: resume the connection whose answer came, or write what the
    /// stream has (`wakeNow`).
    func runOnLoop() {
        let resume = state.withLock { state -> (due: Bool, token: UInt64) in
            state.flags[.queued] = false
            guard state.flags[.resumeDue] else { return (false, 0) }
            state.flags[.resumeDue] = false
            defer { state.watchToken = 0 }
            return (true, state.watchToken)
        }
        guard resume.due else { return wakeNow() }
        if resume.token != 0 { loop.unwatch(resume.token) }  // before resuming: MHD may then close the socket
        resumeNow()
    }

    /// Hands a connection this context marked as no longer suspended back to MHD, on the
    /// loop, never under the context's lock.
    func resumeNow() {
        loop.assertIsWriter()
        MHD_resume_connection(connection.raw)
        server.didResume()
    }

    /// A header added to whatever response this request gets, now or later (the request id).
    public func addResponseHeader(_ name: String, _ value: String) {
        state.withLock { $0.extraHeaders.append(name, value) }
    }

    /// Headers added to whatever response this request gets, now or later (CORS).
    public func addResponseHeaders(_ headers: [(String, String)]) {
        state.withLock { $0.extraHeaders.append(contentsOf: headers) }
    }

    var extraHeaders: ExtraHeaders { state.withLock { $0.extraHeaders } }

    /// Runs `handler` if the client goes away while this request waits. Registered by the
    /// handler before it returns `.suspend`.
    public func onClientGone(_ handler: @escaping @Sendable () -> Void) {
        state.withLock { $0.goneHandlers.append(handler) }
    }

    // MARK: Server side (the event loop, in MHD's callbacks)

    /// Collects a piece of the request body; past `limit` the rest is dropped and the
    /// request will be answered 413.
    func appendBody(_ data: UnsafeRawBufferPointer, limit: Int) {
        state.withLock { state in
            guard !state.flags[.bodyTooLarge] else { return }
            if state.buffer.count + data.count > limit {
                state.flags[.bodyTooLarge] = true
                state.buffer = []
            } else {
                state.buffer.append(contentsOf: data)
            }
        }
    }

    /// The body read so far, or nil when it was too large.
    func takeBody() -> Bytes? {
        state.withLock { state in
            defer { state.buffer = [] }
            return state.flags[.bodyTooLarge] ? nil : (state.buffer.isEmpty ? .empty : Bytes(state.buffer))
        }
    }

    /// True the first time: the request should go to the handler now.
    func start() -> Bool {
        state.withLock { state in
            defer { state.flags[.started] = true }
            return !state.flags[.started]
        }
    }

    func takeResponse() -> Response? {
        state.withLock { state in
            defer { state.response = nil }
            return state.response?.response
        }
    }

    enum SuspendOutcome { case suspended, alreadyAnswered, refused }

    /// Suspends the connection unless the answer is already here. Refused during shutdown.
    func suspend() -> SuspendOutcome {
        let outcome = state.withLock { state -> SuspendOutcome in
            if state.response != nil { return .alreadyAnswered }
            guard server.beginSuspension() else { return .refused }
            MHD_suspend_connection(connection.raw)
            state.flags[.suspended] = true
            let fd = thumbd_mhd_connection_fd(connection.raw)
            if fd >= 0 { state.watchToken = loop.watch(fd: fd, observer: self) ?? 0 }
            return .suspended
        }
        if outcome == .refused { abandon() }
        return outcome
    }

    /// The loop saw the client hang up while suspended.
    func clientGone() {
        if streamGone() { return }
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard state.flags[.suspended], state.response == nil else { return [] }
            state.watchToken = 0  // the loop dropped it already
            defer { state.goneHandlers.removeAll() }
            return state.goneHandlers
        }
        guard !handlers.isEmpty else { return }
        for handler in handlers { handler() }
        // Resume so MHD finds the closed socket and cleans the connection up.
        respond(Response(status: 499))
    }

    /// Tells the handler nobody will read its answer (shutdown refused the suspension).
    private func abandon() {
        let handlers = state.withLock { state in
            defer { state.goneHandlers.removeAll() }
            return state.goneHandlers
        }
        for handler in handlers { handler() }
    }

    /// The request the handler was given.
    /// The request the handler was given, its route, and whether to keep its target for
    /// `finish` (the path of an event stream's request is otherwise held for its whole life).
    func handed(_ request: Request, route: Int, keepingTarget: Bool) {
        state.withLock { state in
            state.request = keepingTarget ? (request.method, request.path, request.query) : (request.method, "", [:])
            state.route = Int16(clamping: route)
        }
    }

    /// The answer queued for it (sent with the context's extra headers).
    func sent(_ response: Response) {
        state.withLock {
            $0.sent = (response.headers, response.stream == nil ? (response.status == 304 ? 0 : response.body.count) : nil,
                       Int16(clamping: response.status))
        }
    }

    /// The connection is done with this request: what it was and what it got, if it
    /// reached the handler.
    func finish() -> Exchange? {
        state.withLock { state -> Exchange? in
            state.flags[.finished] = true
            if state.watchToken != 0 { loop.unwatch(state.watchToken) }
            state.watchToken = 0
            guard let request = state.request else { return nil }
            let sent = state.sent ?? ([], 0, 499)
            return Exchange(method: request.method, path: request.path, query: request.query, route: Int(state.route),
                            status: Int(sent.status), headers: sent.headers,
                            extraHeaders: state.sent != nil ? state.extraHeaders : ExtraHeaders(), bodyBytes: sent.bytes,
                            started: started)
        }
    }
}

struct ConnectionPointer: @unchecked Sendable {  // an MHD handle: used on its loop only, while MHD keeps the connection
    let raw: OpaquePointer
}
