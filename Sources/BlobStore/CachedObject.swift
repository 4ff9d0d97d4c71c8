import Support

/// One cached response: an image (status 200) or a remembered 404/410 (empty body).
///
/// A value with its fields in one shared box (copy on write): a hit hands the object from
/// the hot cache through the lookup to the answer, and each copy is one reference count, not
/// one per text field and the body (a dozen atomic operations a copy, on every hit).
public struct CachedObject: Sendable, Equatable {
    /// The fields, a plain value: the box holds one, never changed once boxed.
    private struct Fields: Sendable, Equatable {
        var key: String
        var url: String
        var status: Int
        var contentType: String
        var body: Bytes
        var etag: String
        var upstreamETag: String?
        var lastModified: String?
        var fetchedAt: Int64
        var expiresAt: Int64
        var graceSeconds: Int
        var revalidated: Bool
    }

    private final class Storage: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    public init(
        key: String, url: String, status: Int, contentType: String, body: Bytes, etag: String,
        upstreamETag: String? = nil, lastModified: String? = nil, fetchedAt: Int64, expiresAt: Int64,
        graceSeconds: Int = 0
    ) {
        storage = Storage(Fields(key: key, url: url, status: status, contentType: contentType, body: body, etag: etag,
                                 upstreamETag: upstreamETag, lastModified: lastModified, fetchedAt: fetchedAt,
                                 expiresAt: expiresAt, graceSeconds: graceSeconds, revalidated: false))
    }

    /// A change makes a new box: the boxed fields never change, so no other copy sees it.
    private mutating func update(_ change: (inout Fields) -> Void) {
        var fields = storage.fields
        change(&fields)
        storage = Storage(fields)
    }

    public var key: String { get { storage.fields.key } set { update { $0.key = newValue } } }
    public var url: String { get { storage.fields.url } set { update { $0.url = newValue } } }
    public var status: Int { get { storage.fields.status } set { update { $0.status = newValue } } }
    public var contentType: String { get { storage.fields.contentType } set { update { $0.contentType = newValue } } }
    public var body: Bytes { get { storage.fields.body } set { update { $0.body = newValue } } }
    /// Strong ETag, quoted, derived from the body.
    public var etag: String { get { storage.fields.etag } set { update { $0.etag = newValue } } }
    public var upstreamETag: String? { get { storage.fields.upstreamETag } set { update { $0.upstreamETag = newValue } } }
    public var lastModified: String? { get { storage.fields.lastModified } set { update { $0.lastModified = newValue } } }
    /// Unix seconds.
    public var fetchedAt: Int64 { get { storage.fields.fetchedAt } set { update { $0.fetchedAt = newValue } } }
    public var expiresAt: Int64 { get { storage.fields.expiresAt } set { update { $0.expiresAt = newValue } } }
    /// How the origin allows it to be served once stale: seconds of grace it granted
    /// (`stale-while-revalidate`), or -1 when it must be revalidated first. The product
    /// interprets it; the store only keeps it.
    public var graceSeconds: Int { get { storage.fields.graceSeconds } set { update { $0.graceSeconds = newValue } } }
    /// Set on the copy an origin's 304 has just renewed, for the answers of that one
    /// flight; never stored (the store keeps and returns copies with it unset).
    public var revalidated: Bool { get { storage.fields.revalidated } set { update { $0.revalidated = newValue } } }

    public func isFresh(at now: Int64) -> Bool { now < storage.fields.expiresAt }
    public func remainingSeconds(at now: Int64) -> Int64 { max(0, storage.fields.expiresAt - now) }

    public static func == (a: CachedObject, b: CachedObject) -> Bool {
        a.storage === b.storage || a.storage.fields == b.storage.fields
    }
}
