import Support

/// One cached response: an image (status 200) or a remembered 404/410 (empty body).
///
/// A value with its fields in one shared box (copy on write): a hit hands the object from
/// the hot cache through the lookup to the answer, and each copy is one reference count, not
/// one per text field and the body (a dozen atomic operations a copy, on every hit).
public struct CachedObject: Sendable, Equatable {
    private final class Storage: Sendable {
        let key: String
        let url: String
        let status: Int
        let contentType: String
        let body: Bytes
        let etag: String
        let upstreamETag: String?
        let lastModified: String?
        let fetchedAt: Int64
        let expiresAt: Int64
        let graceSeconds: Int
        let revalidated: Bool

        init(key: String, url: String, status: Int, contentType: String, body: Bytes, etag: String, upstreamETag: String?,
             lastModified: String?, fetchedAt: Int64, expiresAt: Int64, graceSeconds: Int, revalidated: Bool) {
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
            self.graceSeconds = graceSeconds
            self.revalidated = revalidated
        }
    }

    private var storage: Storage

    public init(
        key: String, url: String, status: Int, contentType: String, body: Bytes, etag: String,
        upstreamETag: String? = nil, lastModified: String? = nil, fetchedAt: Int64, expiresAt: Int64,
        graceSeconds: Int = 0
    ) {
        storage = Storage(key: key, url: url, status: status, contentType: contentType, body: body, etag: etag,
                          upstreamETag: upstreamETag, lastModified: lastModified, fetchedAt: fetchedAt,
                          expiresAt: expiresAt, graceSeconds: graceSeconds, revalidated: false)
    }

    /// A new box with one field changed: the stored fields are immutable, so a copy that
    /// changes one never changes another copy.
    private mutating func change(
        key: String? = nil, url: String? = nil, status: Int? = nil, contentType: String? = nil, body: Bytes? = nil,
        etag: String? = nil, upstreamETag: String?? = nil, lastModified: String?? = nil, fetchedAt: Int64? = nil,
        expiresAt: Int64? = nil, graceSeconds: Int? = nil, revalidated: Bool? = nil
    ) {
        let s = storage
        storage = Storage(key: key ?? s.key, url: url ?? s.url, status: status ?? s.status,
                          contentType: contentType ?? s.contentType, body: body ?? s.body, etag: etag ?? s.etag,
                          upstreamETag: upstreamETag ?? s.upstreamETag, lastModified: lastModified ?? s.lastModified,
                          fetchedAt: fetchedAt ?? s.fetchedAt, expiresAt: expiresAt ?? s.expiresAt,
                          graceSeconds: graceSeconds ?? s.graceSeconds, revalidated: revalidated ?? s.revalidated)
    }

    public var key: String {
        get { storage.key }
        set { change(key: newValue) }
    }
    public var url: String {
        get { storage.url }
        set { change(url: newValue) }
    }
    public var status: Int {
        get { storage.status }
        set { change(status: newValue) }
    }
    public var contentType: String {
        get { storage.contentType }
        set { change(contentType: newValue) }
    }
    public var body: Bytes {
        get { storage.body }
        set { change(body: newValue) }
    }
    /// Strong ETag, quoted, derived from the body.
    public var etag: String {
        get { storage.etag }
        set { change(etag: newValue) }
    }
    public var upstreamETag: String? {
        get { storage.upstreamETag }
        set { change(upstreamETag: .some(newValue)) }
    }
    public var lastModified: String? {
        get { storage.lastModified }
        set { change(lastModified: .some(newValue)) }
    }
    /// Unix seconds.
    public var fetchedAt: Int64 {
        get { storage.fetchedAt }
        set { change(fetchedAt: newValue) }
    }
    public var expiresAt: Int64 {
        get { storage.expiresAt }
        set { change(expiresAt: newValue) }
    }
    /// How the origin allows it to be served once stale: seconds of grace it granted
    /// (`stale-while-revalidate`), or -1 when it must be revalidated first. The product
    /// interprets it; the store only keeps it.
    public var graceSeconds: Int {
        get { storage.graceSeconds }
        set { change(graceSeconds: newValue) }
    }
    /// Set on the copy an origin's 304 has just renewed, for the answers of that one
    /// flight; never stored (the store keeps and returns copies with it unset).
    public var revalidated: Bool {
        get { storage.revalidated }
        set { change(revalidated: newValue) }
    }

    public func isFresh(at now: Int64) -> Bool { now < storage.expiresAt }
    public func remainingSeconds(at now: Int64) -> Int64 { max(0, storage.expiresAt - now) }

    public static func == (a: CachedObject, b: CachedObject) -> Bool {
        if a.storage === b.storage { return true }
        let x = a.storage, y = b.storage
        return x.key == y.key && x.url == y.url && x.status == y.status && x.contentType == y.contentType
            && x.body == y.body && x.etag == y.etag && x.upstreamETag == y.upstreamETag && x.lastModified == y.lastModified
            && x.fetchedAt == y.fetchedAt && x.expiresAt == y.expiresAt && x.graceSeconds == y.graceSeconds
            && x.revalidated == y.revalidated
    }
}
