import Support
import Dispatch

/// The writer connection and the running totals it maintains. Touched only on the writer
/// queue, which is what makes the `@unchecked Sendable` sound.
final class WriterState: @unchecked Sendable {
    private let db: Connection
    /// The keys with a row, told of every row added or deleted once it has committed.
    let keys: KeyIndex
    private(set) var totalBytes: Int64 = 0
    private(set) var objectCount = 0
    private(set) var evictions = 0
    private(set) var isClosed = false
    var flushTimer: (any DispatchSourceTimer)?

    init(db: Connection, keys: KeyIndex) {
        self.db = db
        self.keys = keys
    }

    var statistics: CacheStore.Statistics {
        .init(objects: objectCount, bytes: totalBytes, evictions: evictions)
    }

    /// Fills the key index from the table (at open).
    func loadKeys() throws {
        let statement = try db.cached("SELECT key FROM objects")
        defer { statement.reset() }
        var stored: [String] = []
        while try statement.step() { stored.append(statement.text(0) ?? "") }
        keys.reset(to: stored)
    }

    func loadTotals() throws {
        let statement = try db.cached("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM objects")
        defer { statement.reset() }
        if try statement.step() {
            objectCount = Int(statement.int64(0))
            totalBytes = statement.int64(1)
        }
    }

    var commits: Int { db.commits }

    /// Runs `body`'s writes in one transaction: each write's own transaction is a savepoint
    /// of it. If it throws, nothing of it is committed, and the counters are true again
    /// only after `recover()` (the key index is told only of what committed).
    func inOneTransaction<T>(_ body: () throws -> T) throws -> T {
        try db.transaction(body)
    }

    /// Counters change only once the commit succeeded: a COMMIT that fails (SQLITE_FULL)
    /// rolls the row back, and must not leave the totals claiming it.
    func insert(_ object: CachedObject, lastAccess: Int64) throws {
        let replacedSize: Int64? = try db.transaction {
            let old = try db.cached("SELECT size FROM objects WHERE key = ?")
            try old.bind([.text(object.key)])
            let replacedSize: Int64? = try old.step() ? old.int64(0) : nil
            old.reset()
            if replacedSize == nil { db.onCommit { [keys] in keys.added(object.key) } }
            try db.cached(
                """
                INSERT OR REPLACE INTO objects (key, url, status, content_type, size, etag, upstream_etag,
                    last_modified, fetched_at, expires_at, last_access, body, grace)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
            ).run([
                .text(object.key), .text(object.url), .integer(Int64(object.status)), .text(object.contentType),
                .integer(Int64(object.body.count)), .text(object.etag),
                object.upstreamETag.map(SQLiteValue.text) ?? .null,
                object.lastModified.map(SQLiteValue.text) ?? .null,
                .integer(object.fetchedAt), .integer(object.expiresAt), .integer(lastAccess), .blob(object.body),
                .integer(Int64(object.graceSeconds)),
            ])
            return replacedSize
        }
        totalBytes += Int64(object.body.count) - (replacedSize ?? 0)
        if replacedSize == nil { objectCount += 1 }
    }

    /// A revalidated object: new lifetime and validators, the body untouched (no blob is
    /// rewritten). Returns false when the row has gone meanwhile (evicted or purged).
    func refresh(_ object: CachedObject, lastAccess: Int64) throws -> Bool {
        try db.cached(
            """
            UPDATE objects SET upstream_etag = ?, last_modified = ?, fetched_at = ?, expires_at = ?, grace = ?,
                last_access = ? WHERE key = ? AND etag = ?
            """
        ).run([
            object.upstreamETag.map(SQLiteValue.text) ?? .null, object.lastModified.map(SQLiteValue.text) ?? .null,
            .integer(object.fetchedAt), .integer(object.expiresAt), .integer(Int64(object.graceSeconds)),
            .integer(lastAccess), .text(object.key), .text(object.etag),
        ])
        return db.changes > 0
    }

    /// After a failed write: the totals are read again from what is committed, and the WAL
    /// is checkpointed and truncated, which gives back the disk space a full disk needs
    /// (a failed transaction leaves the WAL file at its largest).
    func recover() {
        try? loadTotals()
        try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    func touch(_ batch: [String: Int64]) throws {
        try db.transaction {
            let statement = try db.cached("UPDATE objects SET last_access = ? WHERE key = ? AND last_access < ?")
            for (key, time) in batch {
                try statement.run([.integer(time), .text(key), .integer(time)])
            }
        }
    }

    /// Deletes least recently used objects, oldest first, until the total is at most
    /// `target` bytes; no more than needed.
    func evict(downTo target: Int64) throws -> [String] {
        var evicted: [String] = []
        while totalBytes > target {
            let batch = try db.transaction { () throws -> (keys: [String], bytes: Int64) in
                let oldest = try db.cached("SELECT rowid, size, key FROM objects ORDER BY last_access LIMIT 64")
                var victims: [(rowid: Int64, key: String)] = []
                var freed: Int64 = 0
                while freed < totalBytes - target, try oldest.step() {
                    victims.append((oldest.int64(0), oldest.text(2) ?? ""))
                    freed += oldest.int64(1)
                }
                oldest.reset()
                let delete = try db.cached("DELETE FROM objects WHERE rowid = ?")
                for victim in victims { try delete.run([.integer(victim.rowid)]) }
                db.onCommit { [keys] in keys.removed(victims.map(\.key)) }
                return (victims.map(\.key), freed)
            }
            if batch.keys.isEmpty { break }
            totalBytes -= batch.bytes
            objectCount -= batch.keys.count
            evicted += batch.keys
        }
        evictions += evicted.count
        return evicted
    }

    func purge(_ key: String?) throws -> Int {
        let removed: Int = try db.transaction {
            if let key {
                try db.cached("DELETE FROM objects WHERE key = ?").run([.text(key)])
                if db.changes > 0 { db.onCommit { [keys] in keys.removed([key]) } }
            } else {
                try db.cached("DELETE FROM objects").run()
                db.onCommit { [keys] in keys.reset(to: []) }
            }
            return db.changes
        }
        try loadTotals()
        return removed
    }

    func checkpoint() {
        try? db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    func close() {
        db.close()
        isClosed = true
    }
}
