import Dispatch
import Foundation
import Logging
import Synchronization

/// The SQLite cache: WAL mode, one writer connection confined to a serial queue, and a
/// pool of read-only connections so that a hit never waits behind a write (WAL readers see
/// the last committed state without taking the write lock).
///
/// An object becomes visible only when its single-row `INSERT` commits, so a crash can
/// never leave a half-written body that could be served.
public final class CacheStore: Sendable {
    public struct Statistics: Sendable, Equatable {
        public var objects: Int
        public var bytes: Int64
        public var evictions: Int
    }

    private let configuration: StoreConfiguration
    private let writerQueue = DispatchQueue(label: "thumbd.store.writer")
    private let writer: WriterState
    private let readers = Mutex<[ReadConnection]>([])
    private let pendingAccess = Mutex<[String: Int64]>([:])
    private let closed = Mutex(false)
    private let hot: HotCache
    private let logger: Logger

    public init(configuration: StoreConfiguration, logger: Logger = Logger(label: "thumbd.store")) throws {
        self.configuration = configuration
        self.logger = logger
        self.hot = HotCache(capacityBytes: configuration.memoryBytes)
        let directory = (configuration.path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let db = try Connection(path: configuration.path, readOnly: false)
        do {
            try db.execute("PRAGMA journal_mode = WAL")
            // NORMAL in WAL mode: an application crash loses nothing committed; a power loss may
            // lose the last transactions but never corrupts the file. A cache can refetch.
            try db.execute("PRAGMA synchronous = NORMAL")
            try Schema.migrate(db)
        } catch {
            db.close()
            throw error
        }
        writer = WriterState(db: db)
        try writerQueue.sync { try writer.loadTotals() }
        let timer = DispatchSource.makeTimerSource(queue: writerQueue)
        let interval = DispatchTimeInterval.milliseconds(configuration.accessFlushMilliseconds)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.flushAccessTimes() }
        writerQueue.sync { writer.flushTimer = timer }
        timer.resume()
    }

    // MARK: Reads (any thread)

    /// Looks up `key` in memory, else on a pooled read connection; never touches the writer.
    public func lookup(_ key: String) throws -> CachedObject? {
        if let object = hot.get(key) { return object }
        let epoch = hot.epoch
        let reader = try checkoutReader()
        defer { checkin(reader) }
        guard let object = try reader.lookup(key) else { return nil }
        hot.fill(object, readAt: epoch)
        return object
    }

    /// Remembers that `key` was served; written in batches for LRU ordering.
    public func recordAccess(_ key: String) {
        let now = Self.nowMilliseconds()
        pendingAccess.withLock { $0[key] = now }
    }

    // MARK: Writes (serialized on the writer queue)

    /// Stores `object` (replacing any older copy) and evicts past the size limit, then calls
    /// `completion` on the writer queue. The object is visible to `lookup` at once through
    /// the memory layer (so the next request is a hit, not a second fetch); if the commit
    /// fails it is taken out again.
    public func insert(_ object: CachedObject, completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        hot.put(object)
        writerQueue.async { [self] in
            let result = Result { () throws -> Void in
                try writer.insert(object, lastAccess: Self.nowMilliseconds())
                try evictIfNeeded()
            }
            if case .failure(let error) = result {
                hot.remove([object.key])
                logger.error("store.insert failed", metadata: ["error": "\(error)", "cache.key": "\(object.key)"])
            }
            completion(result)
        }
    }

    public func insert(_ object: CachedObject) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            insert(object) { continuation.resume(with: $0) }
        }
    }

    /// Removes one key, or everything when `key` is nil. Returns how many objects went.
    public func purge(_ key: String?) throws -> Int {
        try writerQueue.sync {
            let removed = try writer.purge(key)
            if let key { hot.remove([key]) } else { hot.removeAll() }
            return removed
        }
    }

    public func statistics() -> Statistics {
        writerQueue.sync { writer.statistics }
    }

    /// Flushes pending access times and closes every connection. Idempotent.
    public func close() {
        let wasClosed = closed.withLock { value in
            defer { value = true }
            return value
        }
        guard !wasClosed else { return }
        writerQueue.sync {
            writer.flushTimer?.cancel()
            flushAccessTimesOnWriter()
            writer.close()
        }
        let pool = readers.withLock { pool in
            defer { pool.removeAll() }
            return pool
        }
        for reader in pool { reader.close() }
    }

    // MARK: Internals

    private func checkoutReader() throws -> ReadConnection {
        if let reader = readers.withLock({ $0.popLast() }) { return reader }
        return try ReadConnection(path: configuration.path)
    }

    private func checkin(_ reader: ReadConnection) {
        let keep = readers.withLock { pool -> Bool in
            guard pool.count < 64 else { return false }
            pool.append(reader)
            return true
        }
        if !keep { reader.close() }
    }

    private func flushAccessTimes() {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        flushAccessTimesOnWriter()
    }

    private func flushAccessTimesOnWriter() {
        let batch = pendingAccess.withLock { pending in
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        guard !batch.isEmpty, !writer.isClosed else { return }
        do {
            try writer.touch(batch)
        } catch {
            logger.warning("store.touch failed", metadata: ["error": "\(error)"])
        }
    }

    private func evictIfNeeded() throws {
        guard writer.totalBytes > configuration.maxBytes else { return }
        flushAccessTimesOnWriter()  // so the LRU order reflects recent hits
        let target = configuration.maxBytes - configuration.maxBytes / 10
        let evicted = try writer.evict(downTo: target)
        hot.remove(evicted)
        logger.debug("store.evicted", metadata: ["count": "\(evicted.count)", "bytes": "\(writer.totalBytes)"])
    }

    static func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// The writer connection and the running totals it maintains. Touched only on the writer
/// queue, which is what makes the `@unchecked Sendable` sound.
private final class WriterState: @unchecked Sendable {
    private let db: Connection
    private(set) var totalBytes: Int64 = 0
    private(set) var objectCount = 0
    private(set) var evictions = 0
    private(set) var isClosed = false
    var flushTimer: (any DispatchSourceTimer)?

    init(db: Connection) { self.db = db }

    var statistics: CacheStore.Statistics {
        .init(objects: objectCount, bytes: totalBytes, evictions: evictions)
    }

    func loadTotals() throws {
        let statement = try db.cached("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM objects")
        defer { statement.reset() }
        if try statement.step() {
            objectCount = Int(statement.int64(0))
            totalBytes = statement.int64(1)
        }
    }

    func insert(_ object: CachedObject, lastAccess: Int64) throws {
        try db.transaction {
            let old = try db.cached("SELECT size FROM objects WHERE key = ?")
            try old.bind([.text(object.key)])
            let replacedSize: Int64? = try old.step() ? old.int64(0) : nil
            old.reset()
            try db.cached(
                """
                INSERT OR REPLACE INTO objects (key, url, status, content_type, size, etag, upstream_etag,
                    last_modified, fetched_at, expires_at, last_access, body)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
            ).run([
                .text(object.key), .text(object.url), .integer(Int64(object.status)), .text(object.contentType),
                .integer(Int64(object.body.count)), .text(object.etag),
                object.upstreamETag.map(SQLiteValue.text) ?? .null,
                object.lastModified.map(SQLiteValue.text) ?? .null,
                .integer(object.fetchedAt), .integer(object.expiresAt), .integer(lastAccess), .blob(object.body),
            ])
            totalBytes += Int64(object.body.count) - (replacedSize ?? 0)
            if replacedSize == nil { objectCount += 1 }
        }
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
            } else {
                try db.cached("DELETE FROM objects").run()
            }
            return db.changes
        }
        try loadTotals()
        return removed
    }

    func close() {
        db.close()
        isClosed = true
    }
}

/// A read-only connection with its lookup statement. Used by one thread at a time: it is
/// taken out of the pool's mutex, used, and put back — hence `@unchecked Sendable`.
private final class ReadConnection: @unchecked Sendable {
    private let db: Connection

    init(path: String) throws {
        db = try Connection(path: path, readOnly: true)
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
            SELECT url, status, content_type, etag, upstream_etag, last_modified, fetched_at, expires_at, body
            FROM objects WHERE key = ?
            """)
        try statement.bind([.text(key)])
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return CachedObject(
            key: key, url: statement.text(0) ?? "", status: Int(statement.int64(1)),
            contentType: statement.text(2) ?? "application/octet-stream", body: statement.blob(8),
            etag: statement.text(3) ?? "", upstreamETag: statement.text(4), lastModified: statement.text(5),
            fetchedAt: statement.int64(6), expiresAt: statement.int64(7))
    }

    func close() { db.close() }
}
