import Foundation

/// `GET /stats` (what `thumbd stats` prints) and `DELETE /cache[?url=…]` (what
/// `thumbd purge` does). Like the rest of thumbd they listen on loopback by default; put
/// them behind your own access control if you listen elsewhere.
struct AdminHandler: Sendable {
    let source: ObjectSource
    let policy: DestinationPolicy
    let maxBytes: Int64
    let status: @Sendable () -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int)

    func handle(_ request: Request) -> Response {
        switch (request.path, request.method) {
        case ("/stats", "GET"), ("/stats", "HEAD"):
            let store = source.store.statistics()
            let counters = source.counters
            let now = status()
            let stats = DaemonStats(
                objects: store.objects, bytes: store.bytes, maxBytes: maxBytes, evictions: store.evictions,
                hits: counters.hits.load(ordering: .relaxed), misses: counters.misses.load(ordering: .relaxed),
                coalesced: counters.coalesced.load(ordering: .relaxed), stale: counters.stale.load(ordering: .relaxed),
                hitRatio: counters.hitRatio, fetchesInFlight: now.fetches, waitingRequests: now.waiting,
                openEventStreams: now.streams, runningBatches: now.running, keptBatches: now.kept,
                storeWritable: source.store.writeHealth == nil)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let body = (try? encoder.encode(stats)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            return .json(200, body + "\n", headers: [("Cache-Control", "no-store")])
        case ("/cache", "DELETE"):
            do {
                let removed: Int
                if let url = request.query["url"] {
                    removed = try source.store.purge(try policy.validate(url).url)
                } else if request.query["all"] == "1" || request.query.isEmpty {
                    removed = try source.store.purge(nil)
                } else {
                    return .error(.badRequest(.badParameter, "use DELETE /cache?url=… or DELETE /cache"))
                }
                return .json(200, "{\"purged\":\(removed)}\n", headers: [("Cache-Control", "no-store")])
            } catch let error as ThumbdError {
                return .error(error)
            } catch {
                // The cause (a full disk) is in the log and in /healthz; not SQLite's text here.
                return .error(.unavailable(.storeUnavailable, "the cache cannot be written now; see /healthz"),
                              headers: [("Retry-After", "10")])
            }
        case ("/stats", _):
            return Router.notAllowed("GET, HEAD")
        default:
            return Router.notAllowed("DELETE")
        }
    }
}
