/// `GET /stats`: what `thumbd stats` prints. One Codable type for both ends of the wire.
public struct DaemonStats: Codable, Sendable, Equatable {
    public var objects: Int
    public var bytes: Int64
    public var maxBytes: Int64
    public var evictions: Int
    public var hits: Int
    public var misses: Int
    public var coalesced: Int
    public var stale: Int
    public var revalidated: Int
    /// hits / (hits + misses + coalesced + stale + revalidated), since start.
    public var hitRatio: Double
    public var fetchesInFlight: Int
    public var waitingRequests: Int
    public var openEventStreams: Int
    public var runningBatches: Int
    public var keptBatches: Int
    /// Thumbnails made (one per variant however many asked), failed ones included.
    public var thumbnails: Int
    /// Of those, the ones decoded while their original downloaded (on-screen batch items,
    /// `thumbnails.streams`).
    public var thumbnailsStreamed: Int
    /// False while cache writes fail (a full disk); see /healthz.
    public var storeWritable: Bool
}
