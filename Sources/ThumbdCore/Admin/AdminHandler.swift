import Foundation
import HTTPServer

/// `GET /stats` (what `thumbd stats` prints) and `DELETE /cache[?url=…]` (what
/// `thumbd purge` does). Neither makes a server thread wait for SQLite: the stats read the
/// totals the writer published last, and a purge is answered from the writer queue. Like the
/// rest of thumbd they listen on loopback (and answer only its names, RequestGuard).
struct AdminHandler: Sendable {
    let source: ObjectSource
    let variants: VariantSource
    let policy: DestinationPolicy
    let maxBytes: Int64
    let status: @Sendable () -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int)

    func handle(_ request: Request, context: RequestContext) -> HandlerResult {
        switch (request.path, request.method) {
        case ("/stats", "GET"), ("/stats", "HEAD"):
            let store = source.store.statistics()
            let counters = source.counters
            let now = status()
            let stats = DaemonStats(
                objects: store.objects, bytes: store.bytes, maxBytes: maxBytes, evictions: store.evictions,
                hits: counters[.hit], misses: counters[.miss], coalesced: counters[.coalesced], stale: counters[.stale],
                revalidated: counters[.revalidated],
                hitRatio: counters.hitRatio, fetchesInFlight: now.fetches, waitingRequests: now.waiting,
                openEventStreams: now.streams, runningBatches: now.running, keptBatches: now.kept, thumbnails: variants.resizes,
                thumbnailsStreamed: variants.streamed,
                storeWritable: source.store.writeHealth == nil)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let body = (try? encoder.encode(stats)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            return .response(.json(200, body + "\n", headers: [("Cache-Control", "no-store")]))
        case ("/cache", "DELETE"):
            let key: String?
            if let url = request.query["url"] {
                do {
                    key = try policy.validate(url).url
                } catch {
                    return .response(.error(error))
                }
            } else if request.query["all"] == "1" || request.query.isEmpty {
                key = nil
            } else {
                return .response(.error(.badRequest(.badParameter, "use DELETE /cache?url=… or DELETE /cache")))
            }
            // Answered from the writer queue: no server thread waits for SQLite.
            source.store.purge(key) { result in
                switch result {
                case .success(let removed):
                    context.respond(.json(200, "{\"purged\":\(removed)}\n", headers: [("Cache-Control", "no-store")]))
                case .failure:
                    // The cause (a full disk) is in the log and in /healthz; not SQLite's text here.
                    context.respond(.error(.unavailable(.storeUnavailable, "the cache cannot be written now; see /healthz"),
                                           headers: [("Retry-After", "10")]))
                }
            }
            return .suspend
        case ("/stats", _):
            return .response(Router.notAllowed("GET, HEAD"))
        default:
            return .response(Router.notAllowed("DELETE"))
        }
    }
}
