/// A request as handlers see it: copied out of libmicrohttpd on its thread, so it can go
/// anywhere. Header names are lower-case; only the headers in `ServerCore.headerNames`
/// are copied (add a name there when a handler needs one more).
public struct Request: Sendable {
    public var method: String
    public var path: String
    public var query: [String: String]
    public var headers: [String: String]

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:]) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
    }
}

public struct Response: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Bytes

    public init(status: Int, headers: [(String, String)] = [], body: Bytes = .empty) {
        self.status = status
        self.headers = headers
        self.body = body
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

public protocol HTTPHandler: Sendable {
    func handle(_ request: Request, context: RequestContext) -> HandlerResult
}
