import Support
internal import CSQLite
import Dispatch
import Foundation
import Logging
import Synchronization

/// Writes: serialized on the writer queue, grouped into one transaction per drain of the mailbox
/// (`store.commitDelayMilliseconds`), each caller told by its completion.
extension CacheStore {
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

    func post(_ task: WriterTask) {
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
    func drainMailbox() {
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
    func commit(_ writes: [PendingWrite]) {
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
    func groupCommitted(_ writes: [PendingWrite], grew: inout Bool) -> Bool {
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
    func publishOutcome(of writes: [PendingWrite], results: [Result<Void, any Error>], grew: Bool) {
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

    func purgeOnWriter(_ key: String?) throws -> Int {
        dispatchPrecondition(condition: .onQueue(writerQueue))
        defer { publishStatistics() }
        do {
            let removed: Int
            do {
                removed = try writer.purge(key)
            } catch {
                // A full disk cannot take even a delete: give up the reserve, then retry. Not
                // `recover()`: its checkpoint copies the WAL into the database file, which
                // grows it into the space just given up, and the retry then fails as well.
                guard reserve.release() else { throw error }
                try? writer.loadTotals()
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
}
