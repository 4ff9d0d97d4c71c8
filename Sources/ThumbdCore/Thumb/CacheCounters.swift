import Synchronization

/// How requests were served since start (for `GET /stats` and `thumbd stats`).
final class CacheCounters: Sendable {
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let coalesced = Atomic<Int>(0)
    let stale = Atomic<Int>(0)

    func count(_ cache: String) {
        switch cache {
        case "hit": hits.add(1, ordering: .relaxed)
        case "miss": misses.add(1, ordering: .relaxed)
        case "coalesced": coalesced.add(1, ordering: .relaxed)
        case "stale": stale.add(1, ordering: .relaxed)
        default: break
        }
    }

    /// Hits over everything served: hit + miss + coalesced + stale.
    var hitRatio: Double {
        let hit = hits.load(ordering: .relaxed)
        let total = hit + misses.load(ordering: .relaxed) + coalesced.load(ordering: .relaxed) + stale.load(ordering: .relaxed)
        return total == 0 ? 0 : Double(hit) / Double(total)
    }
}
