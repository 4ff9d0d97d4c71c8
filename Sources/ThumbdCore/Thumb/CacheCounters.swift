import BlobStore
import Synchronization

/// How one answer was served, as `X-Thumbd-Cache` says it.
enum CacheResult: String, CaseIterable, Sendable {
    /// From the cache, fresh.
    case hit
    /// This request started the fetch (or resize).
    case miss
    /// It joined a fetch (or resize) already in flight.
    case coalesced
    /// An expired copy: within its grace while it is refreshed, or because the origin failed.
    case stale
    /// An expired copy the origin confirmed with a 304 (a variant: whose original did).
    case revalidated

    /// The result of a flight for one of its waiters.
    static func of(_ role: FlightRole, _ object: CachedObject?) -> CacheResult {
        switch role {
        case .leader: object?.revalidated == true ? .revalidated : .miss
        case .follower: .coalesced
        case .finished: .hit
        }
    }
}

/// How requests were served since start (for `GET /stats`, `thumbd stats` and `/metrics`).
final class CacheCounters: Sendable {
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)
    private let coalesced = Atomic<Int>(0)
    private let stale = Atomic<Int>(0)
    private let revalidated = Atomic<Int>(0)
    private let metrics: DaemonMetrics?

    init(metrics: DaemonMetrics? = nil) { self.metrics = metrics }

    func count(_ result: CacheResult) {
        switch result {
        case .hit: hits.add(1, ordering: .relaxed)
        case .miss: misses.add(1, ordering: .relaxed)
        case .coalesced: coalesced.add(1, ordering: .relaxed)
        case .stale: stale.add(1, ordering: .relaxed)
        case .revalidated: revalidated.add(1, ordering: .relaxed)
        }
        metrics?.count(result)
    }

    subscript(_ result: CacheResult) -> Int {
        switch result {
        case .hit: hits.load(ordering: .relaxed)
        case .miss: misses.load(ordering: .relaxed)
        case .coalesced: coalesced.load(ordering: .relaxed)
        case .stale: stale.load(ordering: .relaxed)
        case .revalidated: revalidated.load(ordering: .relaxed)
        }
    }

    /// Hits over everything served.
    var hitRatio: Double {
        let total = CacheResult.allCases.reduce(0) { $0 + self[$1] }
        return total == 0 ? 0 : Double(self[.hit]) / Double(total)
    }
}
