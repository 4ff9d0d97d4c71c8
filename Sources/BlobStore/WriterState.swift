import Support
import Dispatch

/// The writer connection and the running totals it maintains. Touched only on the writer
/// queue, which is what makes the `@unchecked Sendable` sound.
final class WriterState: @unchecked Sendable {  // confined to the writer queue (checked on entry)
    /// The queue that owns it: every use of the connection checks it is on it.
    let queue: DispatchQueue
    private let connection: Connection
    var db: Connection {
        dispatchPrecondition(condition: .onQueue(queue))
        return connection
    }
    /// The keys with a row, told of every row added or deleted once it has committed.
    let keys: KeyIndex
    /// The memory layer, told of a family's variants removed once the removal has committed
    /// (before it, a reader could fill it again from the old rows).
    private let hot: HotCache
    private(set) var totalBytes: Int64 = 0
    private(set) var objectCount = 0
    private(set) var evictions = 0
    private(set) var isClosed = false
    var flushTimer: (any DispatchSourceTimer)?

    init(db: Connection, queue: DispatchQueue, keys: KeyIndex, hot: HotCache) {
        connection = db
        self.queue = queue
        self.keys = keys
        self.hot = hot
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
    /// An original whose bytes changed (another ETag) takes its variants with it: they were
    /// made from the old bytes.
    func insert(_ object: CachedObject, lastAccess: Int64) throws {
        let (replacedSize, dropped): (Int64?, (count: Int, bytes: Int64)) = try db.transaction {
            let old = try db.cached("SELECT size, etag FROM objects WHERE key = ?")
            try old.bind([.text(object.key)])
            let found = try old.step()
            let replacedSize: Int64? = found ? old.int64(0) : nil
            let replacedETag = found ? old.text(1) : nil
            old.reset()
            if replacedSize == nil { db.onCommit { [keys] in keys.added(object.key) } }
            var dropped = (count: 0, bytes: Int64(0))
            if object.key == object.url, let replacedETag, replacedETag != object.etag {
                dropped = try deleteVariants(of: object.url, except: object.etag)
            }
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
            return (replacedSize, dropped)
        }
        totalBytes += Int64(object.body.count) - (replacedSize ?? 0) - dropped.bytes
        if replacedSize == nil { objectCount += 1 }
        objectCount -= dropped.count
    }

    /// Deletes the variants of the original at `url` (rows that carry its URL under another
    /// key), inside the caller's transaction, but those made from the original whose ETag is
    /// `except` (already the new bytes'); the key index and the memory layer forget them once
    /// it commits.
    private func deleteVariants(of url: String, except current: String? = nil) throws -> (count: Int, bytes: Int64) {
        let keep = current.map(SQLiteValue.text) ?? .null
        let family = try db.cached("SELECT key, size FROM objects WHERE url = ?1 AND key != ?1 AND upstream_etag IS NOT ?2")
        try family.bind([.text(url), keep])
        var victims: [String] = []
        var bytes: Int64 = 0
        while try family.step() {
            victims.append(family.text(0) ?? "")
            bytes += family.int64(1)
        }
        family.reset()
        guard !victims.isEmpty else { return (0, 0) }
        try db.cached("DELETE FROM objects WHERE url = ?1 AND key != ?1 AND upstream_etag IS NOT ?2").run([.text(url), keep])
        db.onCommit { [keys, hot] in
            keys.removed(victims)
            hot.remove(victims)
        }
        return (victims.count, bytes)
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
        var familyCount = 0
        while totalBytes > target {
            let batch = try db.transaction { () throws -> (keys: [String], bytes: Int64) in
                let oldest = try db.cached("SELECT rowid, size, key FROM objects ORDER BY last_access LIMIT 64")
                var victims: [(rowid: Int64, size: Int64, key: String)] = []
                var planned: Int64 = 0
                while planned < totalBytes - target, try oldest.step() {
                    victims.append((oldest.int64(0), oldest.int64(1), oldest.text(2) ?? ""))
                    planned += oldest.int64(1)
                }
                oldest.reset()
                let delete = try db.cached("DELETE FROM objects WHERE rowid = ?")
                var removed: [String] = []
                var freed: Int64 = 0
                for victim in victims {
                    try delete.run([.integer(victim.rowid)])
                    guard db.changes > 0 else { continue }  // a variant gone with its original already
                    removed.append(victim.key)
                    freed += victim.size
                    // An original evicted takes its variants (its family goes as one).
                    let family = try deleteVariants(of: victim.key)
                    freed += family.bytes
                    familyCount += family.count
                }
                db.onCommit { [keys] in keys.removed(removed) }
                return (removed, freed)
            }
            if batch.keys.isEmpty { break }
            totalBytes -= batch.bytes
            objectCount -= batch.keys.count + familyCount
            familyCount = 0
            evicted += batch.keys
        }
        evictions += evicted.count
        return evicted
    }

    func purge(_ key: String?) throws -> Int {
        let removed: Int = try db.transaction {
            if let key {
                try db.cached("DELETE FROM objects WHERE key = ?").run([.text(key)])
                let own = db.changes
                if own > 0 { db.onCommit { [keys] in keys.removed([key]) } }
                return own + (try deleteVariants(of: key).count)  // a URL's purge takes its variants
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
