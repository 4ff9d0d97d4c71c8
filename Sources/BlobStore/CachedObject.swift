import Support

/// One cached response: an image (status 200) or a remembered 404/410 (empty body).
public struct CachedObject: Sendable, Equatable {
    public var key: String
    public var url: String
    public var status: Int
    public var contentType: String
    public var body: Bytes
    /// Strong ETag, quoted, derived from the body.
    public var etag: String
    public var upstreamETag: String?
    public var lastModified: String?
    /// Unix seconds.
    public var fetchedAt: Int64
    public var expiresAt: Int64
    /// How the origin allows it to be served once stale: seconds of grace it granted
    /// (`stale-while-revalidate`), or -1 when it must be revalidated first. The product
    /// interprets it; the store only keeps it.
    public var graceSeconds: Int
    /// Set on the copy an origin's 304 has just renewed, for the answers of that one
    /// flight; never stored (the store keeps and returns copies with it unset).
    public var revalidated = false

    public init(
        key: String, url: String, status: Int, contentType: String, body: Bytes, etag: String,
        upstreamETag: String? = nil, lastModified: String? = nil, fetchedAt: Int64, expiresAt: Int64,
        graceSeconds: Int = 0
    ) {
        self.graceSeconds = graceSeconds
        self.key = key
        self.url = url
        self.status = status
        self.contentType = contentType
        self.body = body
        self.etag = etag
        self.upstreamETag = upstreamETag
        self.lastModified = lastModified
        self.fetchedAt = fetchedAt
        self.expiresAt = expiresAt
    }

    public func isFresh(at now: Int64) -> Bool { now < expiresAt }
    public func remainingSeconds(at now: Int64) -> Int64 { max(0, expiresAt - now) }
}
