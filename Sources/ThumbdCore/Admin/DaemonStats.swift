/// `GET /stats`: what `thumbd stats` prints. One Codable type for both ends of the wire.
package struct DaemonStats: Codable, Sendable, Equatable {
    package var objects: Int
    package var bytes: Int64
    package var maxBytes: Int64
    package var evictions: Int
    package var hits: Int
    package var misses: Int
    package var coalesced: Int
    package var stale: Int
    package var revalidated: Int
    /// hits / (hits + misses + coalesced + stale + revalidated), since start.
    package var hitRatio: Double
    package var fetchesInFlight: Int
    package var waitingRequests: Int
    package var openEventStreams: Int
    package var runningBatches: Int
    package var keptBatches: Int
    /// Thumbnails made (one per variant however many asked), failed ones included.
    package var thumbnails: Int
    /// Of those, the ones decoded while their original downloaded (on-screen batch items,
    /// `thumbnails.streams`).
    package var thumbnailsStreamed: Int
    /// False while cache writes fail (a full disk); see /healthz.
    package var storeWritable: Bool
}
