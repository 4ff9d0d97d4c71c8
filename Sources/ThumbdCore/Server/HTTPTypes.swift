/// A request as handlers see it: copied out of libmicrohttpd on its thread, so it can go
/// anywhere. Header names are lower-case; only the headers in `ServerCore.headerNames`
/// are copied (add a name there when a handler needs one more).
public struct Request: Sendable {
    public var method: String
    public var path: String
    public var query: [String: String]
    public var headers: [String: String]
    /// The request body, read whole (bounded by `server.maxBodyBytes`).
    public var body: Bytes
    /// HTTP/1.1 (as opposed to 1.0), which requires a Host header.
    public var isHTTP11: Bool

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
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

    public static func error(_ error: ThumbdError, headers: [(String, String)] = []) -> Response {
        Response(
            status: error.status,
            headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store")] + headers,
            body: error.jsonBody)
    }
}

public enum HandlerResult: Sendable {
    /// Answer now, on the server thread.
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

/// A body produced over time (Server-Sent Events). The server calls `read` on its own
/// threads, one call at a time; the stream calls the waker from any thread when it has
/// something new after answering `.wait`.
public protocol ResponseStream: AnyObject, Sendable {
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamRead
    /// Called once, before the first `read`.
    func attach(_ waker: StreamWaker)
    /// The connection is gone (finished or the client left): release what you hold.
    func detach()
}

public protocol StreamWaker: AnyObject, Sendable {
    func wake()
}

public protocol HTTPHandler: Sendable {
    func handle(_ request: Request, context: RequestContext) -> HandlerResult
}
