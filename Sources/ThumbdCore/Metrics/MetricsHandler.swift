import HTTPServer
import Support

/// `GET /metrics`: a route of the main server, or the only route of its own listener
/// (`metrics.listen`). That listener answers any Host: it serves counts and levels, never
/// URLs or bodies, and is meant for a scraper on another address.
struct MetricsHandler: HTTPHandler {
    let metrics: DaemonMetrics
    let snapshot: @Sendable () -> DaemonMetrics.Snapshot

    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The answer to `GET|HEAD /metrics`.
    func exposition(_ request: Request) -> Response {
        guard request.method == "GET" || request.method == "HEAD" else { return Router.notAllowed("GET, HEAD") }
        return Response(status: 200, headers: [("Content-Type", Self.contentType), ("Cache-Control", "no-store")],
                        body: Bytes(metrics.exposition(snapshot())))
    }

    // MARK: As the handler of its own listener

    func handle(_ request: Request, context: RequestContext) -> HandlerResult {
        guard request.path == "/metrics" else {
            return .response(.error(ThumbdError(.notFound, "this listener serves /metrics only")))
        }
        return .response(exposition(request))
    }

    func render(_ refusal: ServerRefusal) -> Response { .error(ThumbdError(refusal)) }

    func route(of request: Request) -> Int { DaemonMetrics.route(of: request.path) }
    func finished(_ exchange: Exchange) { metrics.record(exchange) }
}
