import Support

/// A read-only connection with its lookup statement. Used by one thread at a time: it is
/// taken out of the pool's mutex, used, and put back — hence `@unchecked Sendable`.
final class ReadConnection: @unchecked Sendable {  // one thread at a time: out of the pool, used, back
    private let db: Connection

    /// How long a read waits for a lock: reads run on the server's threads (a hit's lookup,
    /// `/healthz`), which must not stall for seconds. In WAL mode a reader waits only while
    /// another connection recovers the WAL after a crash; past the bound the lookup fails
    /// (the request is then a miss, fetched) and `/healthz` answers 503.
    static let busyMilliseconds: Int32 = 100

    init(path: String) throws {
        db = try Connection(path: path, readOnly: true, busyMilliseconds: Self.busyMilliseconds)
        do {
            // Hits read blobs through a memory map instead of pread() into a small private
            // page cache: with many distinct hot objects this was the cost of a hit.
            try db.execute("PRAGMA mmap_size = 1073741824")
        } catch {
            db.close()
            throw error
        }
    }

    func lookup(_ key: String) throws -> CachedObject? {
        let statement = try db.cached(
            """
            SELECT url, status, content_type, etag, upstream_etag, last_modified, fetched_at, expires_at, body, grace
            FROM objects WHERE key = ?
            """)
        try statement.bind([.text(key)])
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return CachedObject(
            key: key, url: statement.text(0) ?? "", status: Int(statement.int64(1)),
            contentType: statement.text(2) ?? "application/octet-stream", body: statement.blob(8),
            etag: statement.text(3) ?? "", upstreamETag: statement.text(4), lastModified: statement.text(5),
            fetchedAt: statement.int64(6), expiresAt: statement.int64(7), graceSeconds: Int(statement.int64(9)))
    }

    /// One read of the schema and the objects table's first page.
    func probe() throws {
        let statement = try db.cached("SELECT count(*) FROM (SELECT 1 FROM objects LIMIT 1)")
        defer { statement.reset() }
        _ = try statement.step()
    }

    func close() { db.close() }
}
