import Support
internal import CSQLite
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
    /// Sizes and paths: what the store needs. Freshness is the caller's business.
    public struct Configuration: Sendable {
        /// The database file (WAL mode; `-wal` and `-shm` files sit beside it).
        public var path: String
        /// Total size of cached bodies; least recently used objects go first past it.
        public var maxBytes: Int64 = 1 << 30
        /// Recently served objects also kept in memory, in front of SQLite (0: off).
        public var memoryBytes = 64 << 20
        /// Last-access times (for LRU) are written in batches this often.
        public var accessFlushMilliseconds = 1000
        /// A write waits this long for others to commit with it (0: none). The object is
        /// served from memory meanwhile; only SQLite sees it later.
        public var commitDelayMilliseconds = 20

        public init(path: String) { self.path = path }
    }

    public struct Statistics: Sendable, Equatable {
        public var objects: Int
        public var bytes: Int64
        public var evictions: Int
    }

    private let configuration: Configuration
    private let writerQueue = DispatchQueue(label: "thumbd.store.writer")
    /// Work for the writer queue, in the order it was asked for (see `drainMailbox`).
    private let mailbox = Mutex(WriterMailbox())
    private let writer: WriterState
    private let readers = Mutex<[ReadConnection]>([])
    private let pendingAccess = Mutex<[String: Int64]>([:])
    private let closed = Mutex(false)
    private let hot: HotCache
    /// The keys with a committed row: a miss is answered without SQLite.
    private let keys = KeyIndex()
    private let logger: Logger
    /// The last write failure, while writes fail (cleared by the next success).
    private let writeFailure = Mutex<WriteFailure?>(nil)
    private let failureLog = RateLimitedLog(linesPerWindow: 1, window: .seconds(30))
    private let failedWrites = Atomic<Int>(0)
    private let reserve: SpaceReserve
    /// The writer's totals as of its last operation, so that reading them (`/stats`) never
    /// waits behind a write.
    private let published = Mutex(Statistics(objects: 0, bytes: 0, evictions: 0))

    /// Why writes fail: the disk is full, or another I/O error. Reads go on meanwhile.
    public struct WriteFailure: Sendable, Equatable {
        public var reason: String
        public var since: Date
        public var count: Int
    }

    /// One daemon per file: held from the open to `close()`.
    private let lock: FileLock

    public init(configuration: Configuration, logger: Logger = Logger(label: "thumbd.store")) throws {
        self.configuration = configuration
        self.logger = logger
        self.hot = HotCache(capacityBytes: configuration.memoryBytes)
        let directory = (configuration.path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try Self.makeDirectory(directory)
        }
        let lock = try FileLock(databasePath: configuration.path)
        self.lock = lock
        do {
            do {
                writer = try Self.startWriter(configuration.path, keys: keys, hot: hot, queue: writerQueue)
            } catch let error as SQLiteError where error.isDamage {
                // A cache: what the damaged file held, the web gives back. It is kept, renamed,
                // for whoever wants to look at it, and the daemon starts empty.
                let aside = try Self.moveAside(configuration.path)
                logger.warning("store.damaged: moved aside, starting with an empty cache", metadata: [
                    "store.path": "\(configuration.path)", "store.movedTo": "\(aside)", "error": "\(error)",
                ])
                writer = try Self.startWriter(configuration.path, keys: keys, hot: hot, queue: writerQueue)
            }
        } catch {
            lock.release()
            throw error
        }
        reserve = SpaceReserve(databasePath: configuration.path)
        writerQueue.sync { reserve.ensure() }
        writerQueue.sync { publishStatistics() }
        let timer = DispatchSource.makeTimerSource(queue: writerQueue)
        let interval = DispatchTimeInterval.milliseconds(configuration.accessFlushMilliseconds)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.flushAccessTimes() }
        writerQueue.sync { writer.flushTimer = timer }
        timer.resume()
    }

    /// The writer: its connection set up and migrated, the totals and the keys read (which
    /// reads every row's key: a damaged page shows here). Closed again if any of it fails.
    private static func startWriter(_ path: String, keys: KeyIndex, hot: HotCache, queue: DispatchQueue) throws -> WriterState {
        let state = WriterState(db: try openWriter(path), keys: keys, hot: hot)
        do {
            try queue.sync {
                try state.loadTotals()
                try state.loadKeys()
            }
        } catch {
            queue.sync { state.close() }
            throw error
        }
        return state
    }

    /// The writer's connection, set up and migrated; closed again if that fails.
    private static func openWriter(_ path: String) throws -> Connection {
        let db = try Connection(path: path, readOnly: false)
        do {
            try db.execute("PRAGMA journal_mode = WAL")
            // NORMAL in WAL mode: an application crash loses nothing committed; a power loss may
            // lose the last transactions but never corrupts the file. A cache can refetch.
            try db.execute("PRAGMA synchronous = NORMAL")
            // Debian builds SQLite with SECURE_DELETE, which overwrites every freed page: an
            // eviction or purge then writes as much to the WAL as it frees, and on a full
            // disk cannot run at all. A cache has no secrets to scrub; FAST only zeroes
            // what costs no extra I/O.
            try db.execute("PRAGMA secure_delete = FAST")
            // Not mapped, unlike the readers: the writer walks every page it frees or replaces
            // (overflow chains too), and each one mapped counts in the daemon's RSS; with a
            // 1 GiB mapping the soak's RSS tripled (file pages, reclaimable, but what an
            // operator watches), for ~10% less CPU per insert.
            try Schema.migrate(db)
        } catch {
            db.close()
            throw error
        }
        return db
    }

    /// A failure to set the file up, said plainly (the directory, the system's reason).
    public struct SetupError: Error, CustomStringConvertible {
        public let description: String
    }

    /// `mkdir -p`, with the component that failed and errno's text.
    private static func makeDirectory(_ directory: String) throws {
        var path = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o755) != 0, errno != EEXIST {
                throw SetupError(description: "cannot create the directory \(path): \(String(cString: strerror(errno)))")
            }
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                throw SetupError(description: "\(path) is not a directory")
            }
        }
    }

    /// Renames a damaged database (and its -wal and -shm) to `<path>.damaged-<UTC time>`;
    /// returns the new path.
    private static func moveAside(_ path: String) throws -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let aside = "\(path).damaged-\(formatter.string(from: Date()))"
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try? FileManager.default.removeItem(atPath: aside + suffix)
            try FileManager.default.moveItem(atPath: path + suffix, toPath: aside + suffix)
        }
        return aside
    }

    // MARK: Reads (any thread)

    /// Looks up `key` in memory, else (if a row may exist) on a pooled read connection;
    /// never touches the writer.
    public func lookup(_ key: String) throws -> CachedObject? {
        if let object = hot.get(key) { return object }
        guard keys.mayContain(key) else { return nil }
        let epoch = hot.epoch
        let reader = try checkoutReader()
        defer { checkin(reader) }
        guard let object = try reader.lookup(key) else { return nil }
        hot.fill(object, readAt: epoch)
        return object
    }

    /// Opens the file anew and reads its schema and first page, past the in-memory key index
    /// and hot cache and past the pooled connections' page caches (in WAL mode a reader trusts
    /// its cache while the WAL index is unchanged), which answer most lookups without reading
    /// the file: throws when the file cannot be read (`/healthz`). An open and one read.
    public func probe() throws {
        let reader = try ReadConnection(path: configuration.path)
        defer { reader.close() }
        try reader.probe()
    }

    /// Remembers that `key` was served; written in batches for LRU ordering.
    public func recordAccess(_ key: String) {
        let now = Self.nowMilliseconds()
        pendingAccess.withLock { $0[key] = now }
    }

    // MARK: Writes (serialized on the writer queue)

    /// Stores `object` (replacing any older copy) and evicts past the size limit, then calls
    /// `completion` on the writer queue (the caller keeps answering the key meanwhile: the
    /// row is visible once committed). A replacement is in the memory layer at once (see
    /// `write`); if the commit fails it is taken out again.
    public func insert(_ object: CachedObject, completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        write(object, context: "store.insert", completion: completion) { [self] object in
            try insertOnWriter(object)
        }
    }

    /// On the writer queue: the row written; true (bytes were added).
    func insertOnWriter(_ object: CachedObject) throws -> Bool {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        try writer.insert(object, lastAccess: Self.nowMilliseconds())
        return true
    }

    /// Stores a revalidated `object`'s new lifetime and validators without rewriting its
    /// body (`object.body` must be the stored one: it is written only when the row has
    /// gone meanwhile). In the memory layer at once when its key is stored (see `write`).
    public func refresh(_ object: CachedObject, completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        write(object, context: "store.refresh", completion: completion) { [writer] object in
            if try writer.refresh(object, lastAccess: Self.nowMilliseconds()) { return false }
            try writer.insert(object, lastAccess: Self.nowMilliseconds())
            return true
        }
    }

    /// Bytes of bodies the memory layer holds.
    var memoryHeldBytes: Int { hot.heldBytes }

    /// Transactions the writer has committed (a test's measure of group commits).
    var commits: Int { writerQueue.sync { writer.commits } }

    /// The one write path: `operation` runs on the writer queue (true when it added bytes,
    /// so eviction may be due), committed with the other writes waiting there; a failure
    /// takes the object out of memory again and is reported.
    ///
    /// A new version of a stored key goes into the memory layer at once, so that no reader
    /// can find the older one there (or fill it from SQLite) meanwhile. A key never stored
    /// has no older version to hide: it enters the memory layer only once it is read back,
    /// so that a burst of objects fetched once (a grid scrolled past) neither pushes out the
    /// ones served again and again nor costs memory nobody asks for.
    func write(_ object: CachedObject, context: String,
               completion: @escaping @Sendable (Result<Void, any Error>) -> Void,
               operation: @escaping @Sendable (CachedObject) throws -> Bool) {
        var kept = object
        kept.revalidated = false
        if keys.mayContain(kept.key) || hot.get(kept.key) != nil { hot.put(kept) }
        post(.write(PendingWrite(object: kept, context: context, operation: operation, completion: completion)))
    }

    private func post(_ task: WriterTask) {
        let delay = configuration.commitDelayMilliseconds
        let drain = mailbox.withLock {
            $0.post(task, delayed: delay > 0, groupWrites: Self.groupCommitWrites, groupBytes: Self.groupCommitBytes)
        }
        switch drain {
        case .scheduled:
            return
        case .now:
            writerQueue.async { [self] in drainMailbox() }
        case .later:
            writerQueue.asyncAfter(deadline: .now() + .milliseconds(delay)) { [self] in drainMailbox() }
        }
    }

    /// On the writer queue: runs what the mailbox holds, in order. Consecutive writes commit
    /// together, up to a bound per transaction (so that the WAL does not grow without a
    /// checkpoint through a long burst of large images).
    private func drainMailbox() {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        var group: [PendingWrite] = []
        var groupBytes = 0
        for task in mailbox.withLock({ $0.take() }) {
            switch task {
            case .write(let write):
                group.append(write)
                groupBytes += write.object.body.count
                if group.count >= Self.groupCommitWrites || groupBytes >= Self.groupCommitBytes {
                    commit(group)
                    group.removeAll(keepingCapacity: true)
                    groupBytes = 0
                }
            case .barrier(let work):
                commit(group)
                group.removeAll(keepingCapacity: true)
                groupBytes = 0
                work()
            }
        }
        commit(group)
    }

    static let groupCommitWrites = 256
    static let groupCommitBytes = 16 << 20

    /// Commits `writes` in one transaction: each commit writes the b-tree pages it touched
    /// to the WAL again, so a burst of 100 fetches costs one such write instead of 100. If
    /// that transaction fails, each write runs again in its own, so that only a write that
    /// fails by itself is reported as failed.
    private func commit(_ writes: [PendingWrite]) {
        guard !writes.isEmpty else { return }
        var grew = false
        if writes.count > 1, groupCommitted(writes, grew: &grew) {
            publishOutcome(of: writes, results: Array(repeating: .success(()), count: writes.count), grew: grew)
            return
        }
        var results: [Result<Void, any Error>] = []
        results.reserveCapacity(writes.count)
        for write in writes {
            let result = Result { () throws -> Void in
                if try write.operation(write.object) { grew = true }
            }
            if case .failure(let error) = result {
                hot.remove([write.object.key])
                writeFailed(error, context: write.context)
            }
            results.append(result)
        }
        publishOutcome(of: writes, results: results, grew: grew)
    }

    /// All of `writes` in one transaction; false (and the counters made true again) when it
    /// rolled back.
    private func groupCommitted(_ writes: [PendingWrite], grew: inout Bool) -> Bool {
        var added = false
        do {
            try writer.inOneTransaction {
                for write in writes {
                    if try write.operation(write.object) { added = true }
                }
            }
        } catch {
            writer.recover()
            return false
        }
        grew = added
        return true
    }

    /// After a commit: eviction if bytes were added, the health and statistics, then each
    /// writer's completion.
    private func publishOutcome(of writes: [PendingWrite], results: [Result<Void, any Error>], grew: Bool) {
        var evicted: Result<Void, any Error> = .success(())
        if grew {
            evicted = Result { try evictIfNeeded() }
            if case .failure(let error) = evicted { writeFailed(error, context: "store.evict") }
        }
        if results.contains(where: { (try? $0.get()) != nil }), case .success = evicted {
            writeSucceeded()
        }
        publishStatistics()
        for (write, result) in zip(writes, results) { write.completion(result) }
    }

    public func insert(_ object: CachedObject) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            insert(object) { continuation.resume(with: $0) }
        }
    }

    /// Removes one key, or everything when `key` is nil. Returns how many objects went.
    public func purge(_ key: String?) throws -> Int {
        try writerQueue.sync {
            drainMailbox()  // the writes asked for before this purge come first
            return try purgeOnWriter(key)
        }
    }

    /// The same without blocking the caller: `completion` runs on the writer queue.
    public func purge(_ key: String?, completion: @escaping @Sendable (Result<Int, any Error>) -> Void) {
        post(.barrier { [self] in completion(Result { try purgeOnWriter(key) }) })
    }

    private func purgeOnWriter(_ key: String?) throws -> Int {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        defer { publishStatistics() }
        do {
            let removed: Int
            do {
                removed = try writer.purge(key)
            } catch {
                // A full disk cannot take even a delete: give up the reserve, then retry.
                guard reserve.release() else { throw error }
                writer.recover()
                removed = try writer.purge(key)
            }
            if let key { hot.remove([key]) } else { hot.removeAll() }
            writeSucceeded()
            return removed
        } catch {
            writeFailed(error, context: "store.purge")
            throw error
        }
    }

    /// A journal write (Journals.swift), in order with the cache's writes; `completion` says
    /// whether it committed.
    func journalWrite(_ context: String, completion: @escaping @Sendable (Bool) -> Void = { _ in },
                      _ body: @escaping @Sendable (Connection) throws -> Void) {
        post(.barrier { [self] in
            guard !writer.isClosed else { return completion(false) }
            do {
                try body(writer.db)
                completion(true)
            } catch {
                writeFailed(error, context: context)
                completion(false)
            }
        })
    }

    /// Runs `body` on the writer connection, after the writes asked for before it.
    func onWriter<T>(_ body: (Connection) throws -> T) throws -> T {
        try writerQueue.sync {
            drainMailbox()
            return try body(writer.db)
        }
    }

    /// Writes that failed since the store was opened.
    public var writeFailures: Int { failedWrites.load(ordering: .relaxed) }

    /// Nil while writes succeed; the failure while they do not.
    public var writeHealth: WriteFailure? { writeFailure.withLock { $0 } }

    /// On the writer queue, after any failed write: counters are made true again, space is
    /// given back, and the condition is reported (at a bounded rate).
    private func writeFailed(_ error: any Error, context: String) {
        failedWrites.add(1, ordering: .relaxed)
        writer.recover()
        let reason: String
        if let error = error as? SQLiteError, error.code & 0xFF == 13 {  // SQLITE_FULL
            reason = "the disk is full"
        } else {
            reason = "\(error)"
        }
        let count = writeFailure.withLock { failure -> Int in
            failure = WriteFailure(reason: reason, since: failure?.since ?? Date(), count: (failure?.count ?? 0) + 1)
            return failure!.count
        }
        failureLog.run { suppressed in
            logger.error("store.write failed; serving what is cached, not storing", metadata: [
                "operation": "\(context)", "error": "\(error)", "store.failures": "\(count)", "log.suppressed": "\(suppressed)",
            ])
        }
    }

    private func writeSucceeded() {
        reserve.ensure()
        guard let recovered = writeFailure.withLock({ failure in defer { failure = nil }; return failure }) else { return }
        logger.notice("store.write recovered", metadata: ["store.failures": "\(recovered.count)"])
    }

    /// Never waits for the writer: the totals as of its last operation.
    public func statistics() -> Statistics {
        published.withLock { $0 }
    }

    private func publishStatistics() {
        let current = writer.statistics
        published.withLock { $0 = current }
    }

    /// Flushes pending access times and closes every connection. Idempotent.
    /// Closes the store: the readers first, then the writer, after it has written the
    /// pending access times and checkpointed the WAL into the database (so a restart
    /// starts with an empty log).
    public func close() {
        let wasClosed = closed.withLock { value in
            defer { value = true }
            return value
        }
        guard !wasClosed else { return }
        let pool = readers.withLock { pool in
            defer { pool.removeAll() }
            return pool
        }
        for reader in pool { reader.close() }
        writerQueue.sync {
            drainMailbox()
            writer.flushTimer?.cancel()
            flushAccessTimesOnWriter()
            writer.checkpoint()
            writer.close()
        }
        lock.release()
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
            writeFailed(error, context: "store.touch")
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
