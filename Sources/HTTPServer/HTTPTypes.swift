import Support

/// A request as handlers see it: copied out of libmicrohttpd on its thread, so it can go
/// anywhere. Header names are lower-case; only the headers named in
/// `HTTPServer.Configuration.requestHeaders` are copied.
public struct Request: Sendable {
    public var method: String
    /// The target, when the server keeps it (`Configuration.keepsTargets`); else "" and empty.
    public var path: String
    public var query: Fields
    /// The handler's `route(of:)` for the request.
    public var route = 0
    public var headers: Fields
    /// The request body, read whole (bounded by `Configuration.maxBodyBytes`).
    public var body: Bytes
    /// HTTP/1.1 (as opposed to 1.0), which requires a Host header.
    public var isHTTP11: Bool

    public init(method: String, path: String, query: Fields = [:], headers: Fields = [:],
                body: Bytes = .empty, isHTTP11: Bool = true) {
        self.isHTTP11 = isHTTP11
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }
}

public struct Response: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Bytes
    /// When set, the body is streamed from it instead (length unknown, chunked).
    public var stream: (any ResponseStream)?

    public init(status: Int, headers: [(String, String)] = [], body: Bytes = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public init(status: Int, headers: [(String, String)], stream: any ResponseStream) {
        self.status = status
        self.headers = headers
        self.body = .empty
        self.stream = stream
    }

    public static func json(_ status: Int, _ text: String, headers: [(String, String)] = []) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")] + headers, body: Bytes(text))
    }

}

/// What the server refuses by itself, before or instead of asking the handler. The server
/// knows the status; the product renders the body (`HTTPHandler.render`).
public enum ServerRefusal: Sendable, Equatable {
    /// Past `maxConnections` (503, with a close).
    case tooManyConnections
    /// A new connection or suspension during shutdown (503).
    case shuttingDown
    /// More query parameters than `maxQueryParameters` (414, with a close).
    case tooManyParameters(limit: Int)
    /// An encoded NUL byte in the path (400, with a close).
    case nulInPath
    /// The request did not arrive whole within `requestTimeout` (408, with a close).
    case requestTimeout
    /// Ambiguous body framing (400, with a close); the reason says which rule.
    case badFraming(String)
    /// HTTP/1.1 without Host (400, with a close).
    case missingHost
    /// A body over `maxBodyBytes` (413).
    case bodyTooLarge(limit: Int)
    /// The handler never answered (500): a bug, logged.
    case noResponse

    public var status: Int {
        switch self {
        case .tooManyConnections, .shuttingDown: 503
        case .tooManyParameters: 414
        case .nulInPath, .badFraming, .missingHost: 400
        case .requestTimeout: 408
        case .bodyTooLarge: 413
        case .noResponse: 500
        }
    }
}

public enum HandlerResult: Sendable {
    /// Answer now, on the connection's event loop.
    case response(Response)
    /// The answer comes later through `RequestContext.respond`; the connection is suspended
    /// meanwhile and holds no thread.
    case suspend
}

/// What a streamed body answers when the server asks for more.
public enum StreamRead: Sendable {
    /// This many bytes were written.
    case data(Int)
    /// Nothing now: the connection is suspended until the stream calls `StreamWaker.wake`.
    case wait
    /// The body is complete.
    case end
}

/// A body produced over time (Server-Sent Events). The server calls `read` on the
/// connection's event loop, one call at a time; the stream calls the waker from any thread
/// when it has something new after answering `.wait`, and the loop reads and writes it.
public protocol ResponseStream: AnyObject, Sendable {
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamRead
    /// Called once, before the first `read`.
    func attach(_ waker: StreamWaker)
    /// The connection is gone (finished or the client left): release what you hold.
    func detach()
    /// The server is stopping and ends this stream, which has nothing else to send: the
    /// bytes to send before its end (asked again until it writes none). Each stream is ended
    /// this way once it has nothing to send after `HTTPServer.stopAccepting`, whatever woke
    /// it then, so its last words always come before its end.
    func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int
}

extension ResponseStream {
    public func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int { 0 }
}

/// Wakes a suspended stream: from any thread, never while holding a lock that the stream's
/// `read` takes. The connection's event loop does the reading and the writing, at its next
/// turn; wakes before that turn are one.
public protocol StreamWaker: AnyObject, Sendable {
    func wake()
}

public protocol HTTPHandler: Sendable {
    func handle(_ request: Request, context: RequestContext) -> HandlerResult
    /// The answer to one of the server's own refusals; its status must be `refusal.status`.
    /// Called once per kind at start for the answers written straight to a socket.
    func render(_ refusal: ServerRefusal) -> Response
    /// A request that reached `handle` is over: its answer was sent (or the client left).
    /// Called on an event loop; for access logs and metrics, so it must be quick.
    func finished(_ exchange: Exchange)
    /// A small number for the kind of request (its route), kept until `finished` in
    /// `Exchange.route`: metrics need that, not the whole target.
    func route(of request: Request) -> Int
    /// A new id for an answer the server makes itself (a refusal), sent as `X-Request-Id`
    /// like the handler's own answers; nil: none. Called on the event loops, per refusal.
    func refusalID() -> String?
}

extension HTTPHandler {
    public func finished(_ exchange: Exchange) {}
    public func refusalID() -> String? { nil }
    public func route(of request: Request) -> Int { 0 }
}

/// One request and its answer, once the connection is done with them.
public struct Exchange: Sendable {
    public var method: String
    /// The target, when the server keeps it (`Configuration.keepsTargets`); else "" and empty.
    public var path: String
    public var query: Fields
    /// The handler's `route(of:)` for the request.
    public var route = 0
    /// The status sent; 499 when the client left before its answer (as nginx logs it).
    public var status: Int
    /// The answer's headers: the handler's, and those added through the context.
    public var headers: [(String, String)]
    public var extraHeaders = ExtraHeaders()
    /// The body's length; nil for a streamed body.
    public var bodyBytes: Int?
    /// When the request's headers had been read.
    public var started: ContinuousClock.Instant

    public init(method: String, path: String, query: Fields, status: Int, headers: [(String, String)],
                bodyBytes: Int?, started: ContinuousClock.Instant) {
        self.method = method
        self.path = path
        self.query = query
        self.status = status
        self.headers = headers
        self.bodyBytes = bodyBytes
        self.started = started
    }

    /// All of it at once, for `RequestContext.finish`: made in its return, the exchange is
    /// not copied out of a local and destroyed there (two thousand instructions a request).
    init(method: String, path: String, query: Fields, route: Int, status: Int, headers: [(String, String)],
         extraHeaders: ExtraHeaders, bodyBytes: Int?, started: ContinuousClock.Instant) {
        self.method = method
        self.path = path
        self.query = query
        self.route = route
        self.status = status
        self.headers = headers
        self.extraHeaders = extraHeaders
        self.bodyBytes = bodyBytes
        self.started = started
    }

    /// From the request's headers being read to now: in `HTTPHandler.finished`, to the answer
    /// having been sent. Read from the clock only by whoever wants it (the access log), not
    /// on every request.
    public func duration(until now: ContinuousClock.Instant = .now) -> Duration { now - started }

    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) }?.1 ?? extraHeaders.value(named: name)
    }
}

/// Headers a request's answer carries whatever it is, added by the handler's own steps (the
/// request id, CORS). Nearly every request adds exactly one: it is held inline, and an array
/// is made only past it. Every request, and every open event stream, holds one of these.
public struct ExtraHeaders: Sendable {
    private var first: (String, String)?
    private var rest: [(String, String)] = []

    public init(_ headers: [(String, String)] = []) {
        append(contentsOf: headers)
    }

    public mutating func append(_ name: String, _ value: String) {
        if first == nil { first = (name, value) } else { rest.append((name, value)) }
    }

    public mutating func append(contentsOf headers: [(String, String)]) {
        for (name, value) in headers { append(name, value) }
    }

    /// Each header, in the order added.
    public func forEach(_ body: (String, String) -> Void) {
        guard let first else { return }
        body(first.0, first.1)
        for (name, value) in rest { body(name, value) }
    }

    /// The value of the first header named `name` (any case).
    public func value(named name: String) -> String? {
        guard let first else { return nil }
        if first.0.caseInsensitiveCompare(name) { return first.1 }
        return rest.first { $0.0.caseInsensitiveCompare(name) }?.1
    }
}

extension String {
    fileprivate func caseInsensitiveCompare(_ other: String) -> Bool {
        utf8.equalsIgnoringASCIICase(other.utf8)
    }
}
