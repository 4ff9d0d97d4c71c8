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

    let configuration: Configuration
    let writerQueue = DispatchQueue(label: "thumbd.store.writer")
    /// Work for the writer queue, in the order it was asked for (see `drainMailbox`).
    let mailbox = Mutex(WriterMailbox())
    /// The writer, the file lock and the space reserve: set by `open()`.
    private let opened = Slot<Opened>()
    private struct Opened: Sendable {
        let writer: WriterState
        let lock: FileLock
        let reserve: SpaceReserve
    }
    var writer: WriterState { openedParts.writer }
    var reserve: SpaceReserve { openedParts.reserve }
    private var openedParts: Opened {
        guard let opened = opened.value else { preconditionFailure("the cache store is used before open()") }
        return opened
    }
    let readers = Mutex<[ReadConnection]>([])
    let pendingAccess = Mutex<[String: Int64]>([:])
    let closed = Mutex(false)
    let hot: HotCache
    /// The keys with a committed row: a miss is answered without SQLite.
    let keys = KeyIndex()
    let logger: Logger
    /// The last write failure, while writes fail (cleared by the next success).
    let writeFailure = Mutex<WriteFailure?>(nil)
    let failureLog = RateLimitedLog(linesPerWindow: 1, window: .seconds(30))
    let failedWrites = Atomic<Int>(0)
    /// The writer's totals as of its last operation, so that reading them (`/stats`) never
    /// waits behind a write.
    let published = Mutex(Statistics(objects: 0, bytes: 0, evictions: 0))

    /// Why writes fail: the disk is full, or another I/O error. Reads go on meanwhile.
    public struct WriteFailure: Sendable, Equatable {
        public var reason: String
        public var since: Date
        public var count: Int
    }

    /// A store of this file, not open yet (`open()`): building one touches no file, so a
    /// daemon can build its parts first and start them in order.
    public init(configuration: Configuration, logger: Logger = Logger(label: "thumbd.store")) {
        self.configuration = configuration
        self.logger = logger
        self.hot = HotCache(capacityBytes: configuration.memoryBytes)
    }

    /// A store of this file, opened.
    public static func open(configuration: Configuration, logger: Logger = Logger(label: "thumbd.store")) throws -> CacheStore {
        let store = CacheStore(configuration: configuration, logger: logger)
        try store.open()
        return store
    }

    /// Opens the file (made if missing), takes its lock (one daemon per file: held until
    /// `close()`), and starts the writer; once. A damaged file is moved aside and the store
    /// starts empty.
    public func open() throws {
        guard opened.value == nil, !closed.withLock({ $0 }) else { return }
        let directory = (configuration.path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try Self.makeDirectory(directory)
        }
        let lock = try FileLock(databasePath: configuration.path)
        let writer: WriterState
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
        let reserve = SpaceReserve(databasePath: configuration.path)
        opened.set(Opened(writer: writer, lock: lock, reserve: reserve))
        writerQueue.sync { reserve.ensure() }
        writerQueue.sync { publishStatistics() }
        let timer = DispatchSource.makeTimerSource(queue: writerQueue)
        let interval = DispatchTimeInterval.milliseconds(configuration.accessFlushMilliseconds)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.flushAccessTimes() }
        writerQueue.sync { writer.flushTimer = timer }
        timer.resume()
    }

    // MARK: Reads (any thread)

    /// Looks up `key` in memory, else (if a row may exist) on a pooled read connection;
    /// never touches the writer. `accessedAt` (Unix milliseconds): the object found counts as
    /// used then, for the LRU order (as `recordAccess`, without a second lookup).
    public func lookup(_ key: String, accessedAt milliseconds: Int64? = nil) throws -> CachedObject? {
        if let milliseconds {
            if let object = hot.get(key, accessedAt: milliseconds) { return object }
        } else if let object = hot.get(key) {
            return object
        }
        guard keys.mayContain(key) else { return nil }
        let epoch = hot.epoch
        let reader = try checkoutReader()
        defer { checkin(reader) }
        guard let object = try reader.lookup(key) else { return nil }
        if !hot.fill(object, readAt: epoch, accessedAt: milliseconds ?? 0), let milliseconds {
            pendingAccess.withLock { $0[key] = milliseconds }
        }
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

    /// Writes that failed since the store was opened.
    public var writeFailures: Int { failedWrites.load(ordering: .relaxed) }

    /// Nil while writes succeed; the failure while they do not.
    public var writeHealth: WriteFailure? { writeFailure.withLock { $0 } }

    /// On the writer queue, after any failed write: counters are made true again, space is
    /// given back, and the condition is reported (at a bounded rate).
    func writeFailed(_ error: any Error, context: String) {
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

    func writeSucceeded() {
        reserve.ensure()
        guard let recovered = writeFailure.withLock({ failure in defer { failure = nil }; return failure }) else { return }
        logger.notice("store.write recovered", metadata: ["store.failures": "\(recovered.count)"])
    }

    /// Never waits for the writer: the totals as of its last operation.
    public func statistics() -> Statistics {
        published.withLock { $0 }
    }

    func publishStatistics() {
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
        guard !wasClosed, let opened = opened.value else { return }
        let writer = opened.writer
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
        opened.lock.release()
    }

    // MARK: Internals

    func checkoutReader() throws -> ReadConnection {
        if let reader = readers.withLock({ $0.popLast() }) { return reader }
        return try ReadConnection(path: configuration.path)
    }

    func checkin(_ reader: ReadConnection) {
        let keep = readers.withLock { pool -> Bool in
            guard pool.count < 64 else { return false }
            pool.append(reader)
            return true
        }
        if !keep { reader.close() }
    }

    func flushAccessTimes() {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        flushAccessTimesOnWriter()
    }

    func flushAccessTimesOnWriter() {
        var batch = pendingAccess.withLock { pending in
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        batch.merge(hot.takeAccesses()) { max($0, $1) }
        guard !batch.isEmpty, !writer.isClosed else { return }
        do {
            try writer.touch(batch)
        } catch {
            writeFailed(error, context: "store.touch")
        }
    }

    func evictIfNeeded() throws {
        guard writer.totalBytes > configuration.maxBytes else { return }
        flushAccessTimesOnWriter()  // so the LRU order reflects recent hits
        let target = configuration.maxBytes - configuration.maxBytes / 10
        let evicted = try writer.evict(downTo: target)
        hot.remove(evicted)
        logger.debug("store.evicted", metadata: ["count": "\(evicted.count)", "bytes": "\(writer.totalBytes)"])
    }

    /// The clock access times are written in: Unix milliseconds.
    public static func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
