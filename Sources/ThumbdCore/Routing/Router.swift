import HTTPServer
import Support

/// Sends each request to its handler by path; everything else is a JSON 404 or 405.
struct Router: HTTPHandler {
    let thumb: ThumbHandler
    let batches: BatchHandler
    let admin: AdminHandler
    let health: @Sendable () -> Health
    let requestGuard: RequestGuard
    /// `/metrics` here; nil when it is off or served on its own listener.
    let metricsRoute: MetricsHandler?
    let metrics: DaemonMetrics
    let log: RequestLog
    /// `GET /`: thumbd's own page, asking with `thumbnails.pagePreset` when there is one.
    let page: Bytes
    let requestIDs = RequestIDs()

    func render(_ refusal: ServerRefusal) -> Response {
        .error(ThumbdError(refusal))
    }

    func route(of request: Request) -> Int { DaemonMetrics.route(of: request.path) }

    /// The server's own refusals carry an id too, as every answer does.
    func refusalID() -> String? { requestIDs.fresh() }

    func finished(_ exchange: Exchange) {
        metrics.record(exchange)
        log.finished(exchange)
    }

    func handle(_ request: Request, context: RequestContext) -> HandlerResult {
        // The id goes into the answer, the access line and every log line the request causes.
        let id = requestIDs.id(for: request)
        context.addResponseHeader("X-Request-Id", id)
        if let refusal = requestGuard.check(request) { return .response(refusal) }
        let cors = requestGuard.corsHeaders(request)
        if !cors.isEmpty { context.addResponseHeaders(cors) }
        if request.path == "/thumb" {  // the route of nearly every request, asked first
            guard request.method == "GET" || request.method == "HEAD" else { return .response(Self.notAllowed("GET, HEAD")) }
            return thumb.handle(request, context: context, requestID: id)
        }
        if request.path == "/batches" || request.path.hasPrefix("/batches/") {
            return batches.handle(request, context: context, requestID: id)
        }
        switch request.path {
        case "/stats", "/cache":
            return admin.handle(request, context: context)
        case "/metrics" where metricsRoute != nil:
            return .response(metricsRoute!.exposition(request))
        case "/":
            guard request.method == "GET" || request.method == "HEAD" else { return .response(Self.notAllowed("GET, HEAD")) }
            return .response(Response(status: 200, headers: [
                ("Content-Type", "text/html; charset=utf-8"),
                ("Cache-Control", "no-cache"),
                ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'unsafe-inline'; script-src 'self' 'unsafe-inline'"),
            ], body: page))
        case "/thumbd.js":
            // The grid as an ES module, for this daemon's page and for pages of the origins in
            // server.allowedOrigins (a module crosses origins only with CORS, added above).
            return .response(Self.asset(request, ClientModule.body, type: "text/javascript; charset=utf-8"))
        case "/thumbd.d.ts":
            return .response(Self.asset(request, ClientTypes.body, type: "application/typescript; charset=utf-8"))
        case "/openapi.json":
            return .response(Self.asset(request, OpenAPIDocument.body, type: "application/json"))
        case "/healthz":
            guard request.method == "GET" || request.method == "HEAD" else { return .response(Self.notAllowed("GET, HEAD")) }
            switch health() {
            case .ok:
                return .response(.json(200, "{\"status\":\"ok\"}\n", headers: [("Cache-Control", "no-store")]))
            case .degraded(let reason):
                // Still serving (hits, and fetches without storing): 200, but said.
                return .response(.json(200, "{\"status\":\"degraded\",\"reason\":\(JSONText.quote(reason))}\n",
                                       headers: [("Cache-Control", "no-store")]))
            case .unhealthy:
                return .response(.error(.unavailable(.unhealthy, "the cache database cannot be read")))
            }
        default:
            return .response(.error(ThumbdError(.notFound, "no route for \(request.path)")))
        }
    }

    enum Health: Sendable {
        case ok
        /// Serving, but not storing: writes to the cache fail (a full disk).
        case degraded(String)
        case unhealthy
    }

    /// A file this build carries (the module, its declarations, the API document): GET or
    /// HEAD, revalidated on each use (`no-cache`), never sniffed as another type.
    static func asset(_ request: Request, _ body: Bytes, type: String) -> Response {
        guard request.method == "GET" || request.method == "HEAD" else { return notAllowed("GET, HEAD") }
        return Response(status: 200, headers: [
            ("Content-Type", type),
            ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"),
        ], body: body)
    }

    static func notAllowed(_ allow: String) -> Response {
        .error(ThumbdError(.methodNotAllowed, "use \(allow)"), headers: [("Allow", allow)])
    }
}
