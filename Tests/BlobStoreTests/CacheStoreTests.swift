import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing
@testable import BlobStore
import Support

@Suite("CacheStore on a real SQLite file")
struct CacheStoreTests {
    static func withStore(maxBytes: Int64 = 1 << 30, _ body: (CacheStore, CacheStore.Configuration) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = CacheStore.Configuration(path: directory.appendingPathComponent("sub/cache.sqlite").path)
        configuration.maxBytes = maxBytes
        configuration.accessFlushMilliseconds = 10
        let store = try CacheStore(configuration: configuration)
        defer { store.close() }
        try await body(store, configuration)
    }

    static func object(_ key: String, size: Int = 100, byte: UInt8 = 7) -> CachedObject {
        CachedObject(key: key, url: "http://example.org/\(key)", status: 200, contentType: "image/jpeg",
                     body: Bytes([UInt8](repeating: byte, count: size)), etag: "\"\(key)\"", upstreamETag: "\"up\"",
                     lastModified: "Tue, 14 Nov 2023 22:13:20 GMT", fetchedAt: 1, expiresAt: 2)
    }

    @Test("insert, look up, replace, and survive reopening")
    func roundTrip() async throws {
        try await Self.withStore { store, configuration in
            #expect(try store.lookup("a") == nil)
            try await store.insert(Self.object("a"))
            #expect(try store.lookup("a") == Self.object("a"))
            try await store.insert(Self.object("a", size: 50, byte: 9))
            #expect(try store.lookup("a")?.body.array == [UInt8](repeating: 9, count: 50))
            #expect(store.statistics() == .init(objects: 1, bytes: 50, evictions: 0))
            store.close()
            let reopened = try CacheStore(configuration: configuration)
            defer { reopened.close() }
            #expect(try reopened.lookup("a")?.body.count == 50)
            #expect(reopened.statistics().bytes == 50)
        }
    }

    @Test("past the size limit the least recently used objects go first")
    func eviction() async throws {
        try await Self.withStore(maxBytes: 1 << 20) { store, _ in
            let size = 300_000
            try await store.insert(Self.object("old", size: size))
            try await Task.sleep(for: .milliseconds(5))
            try await store.insert(Self.object("used", size: size))
            try await Task.sleep(for: .milliseconds(5))
            try await store.insert(Self.object("new", size: size))
            try await Task.sleep(for: .milliseconds(5))
            store.recordAccess("old")  // "old" was read recently: now "used" is the LRU one
            try await Task.sleep(for: .milliseconds(50))  // let the access batch flush
            try await store.insert(Self.object("newest", size: size))
            #expect(try store.lookup("used") == nil)
            #expect(try store.lookup("old") != nil)
            #expect(try store.lookup("newest") != nil)
            let statistics = store.statistics()
            #expect(statistics.bytes <= 1 << 20)
            #expect(statistics.evictions >= 1)
        }
    }

    @Test("the memory layer takes what is read back, never brings back what was purged, and never holds a replaced version")
    func memoryLayer() async throws {
        try await Self.withStore { store, _ in
            try await store.insert(Self.object("m", byte: 1))
            #expect(store.memoryHeldBytes == 0)  // fetched once: not kept in memory yet
            #expect(try store.lookup("m")?.body.array.first == 1)
            #expect(store.memoryHeldBytes == 100)  // read back: served from memory now
            try await store.insert(Self.object("m", byte: 2))
            #expect(try store.lookup("m")?.body.array.first == 2)
            #expect(try store.purge("m") == 1)
            #expect(try store.lookup("m") == nil)
        }
        let hot = HotCache(capacityBytes: 1000)
        let epoch = hot.epoch
        hot.remove(["x"])  // something was removed while a reader was reading
        hot.fill(Self.object("x", size: 10), readAt: epoch)
        #expect(hot.get("x") == nil)
        hot.fill(Self.object("x", size: 10), readAt: hot.epoch)
        #expect(hot.get("x") != nil)
        hot.fill(Self.object("big", size: 100), readAt: hot.epoch)  // over 1/16 of the capacity
        #expect(hot.get("big") == nil)
        for index in 0..<20 { hot.put(Self.object("k\(index)", size: 60)) }
        #expect((0..<20).filter { hot.get("k\($0)") != nil }.count <= 16)
    }

    @Test("purge removes one key or everything")
    func purge() async throws {
        try await Self.withStore { store, _ in
            for key in ["a", "b", "c"] { try await store.insert(Self.object(key)) }
            #expect(try store.purge("b") == 1)
            #expect(try store.lookup("b") == nil)
            #expect(try store.purge(nil) == 2)
            #expect(store.statistics() == .init(objects: 0, bytes: 0, evictions: 0))
        }
    }
}

@Suite("CacheStore group commit", .ownThreads)
struct GroupCommitTests {
    /// A store whose writer is held busy until `release()`, so that what is asked meanwhile
    /// waits in its mailbox and is drained together.
    final class HeldStore: Sendable {
        let store: CacheStore
        let directory: URL
        /// Transactions committed before the writer was held.
        let commitsBefore: Int
        private let gate = DispatchSemaphore(value: 0)

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-group-\(UUID().uuidString)")
            store = try CacheStore(configuration: .init(path: directory.appendingPathComponent("cache.sqlite").path))
            commitsBefore = store.commits
            let holding = DispatchSemaphore(value: 0)
            store.purge("nothing") { [gate] _ in
                holding.signal()
                gate.wait()
            }
            holding.wait()
        }

        func release() { gate.signal() }

        func close() {
            store.close()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    @Test("writes that waited together commit in one transaction, in the order asked, around a purge")
    func orderAroundPurge() throws {
        let held = try HeldStore()
        defer { held.close() }
        let store = held.store
        let done = DispatchGroup()
        let outcomes = Mutex<[String: Bool]>([:])
        func insert(_ key: String) {
            done.enter()
            store.insert(CacheStoreTests.object(key)) { result in
                outcomes.withLock { $0[key] = (try? result.get()) != nil }
                done.leave()
            }
        }
        insert("before-1")
        insert("before-2")
        done.enter()
        store.purge(nil) { result in
            outcomes.withLock { $0["purged 2"] = (try? result.get()) == 2 }
            done.leave()
        }
        insert("after-1")
        insert("after-2")
        insert("after-3")
        held.release()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(outcomes.withLock { $0 } == [
            "before-1": true, "before-2": true, "purged 2": true, "after-1": true, "after-2": true, "after-3": true,
        ])
        #expect(try store.lookup("before-1") == nil)
        #expect(try store.lookup("after-2") != nil)
        #expect(store.statistics().objects == 3)
        // The held purge, the two writes before the purge, the purge, the three after it:
        // four transactions (one per write would be seven).
        #expect(store.commits - held.commitsBefore == 4)
    }

    @Test("a write that fails inside a group fails alone: the others are stored")
    func failureIsolated() throws {
        let held = try HeldStore()
        defer { held.close() }
        let store = held.store
        struct Refused: Error {}
        let done = DispatchGroup()
        let outcomes = Mutex<[String: Bool]>([:])
        for key in ["a", "bad", "c"] {
            done.enter()
            store.write(CacheStoreTests.object(key), context: "test") { result in
                outcomes.withLock { $0[key] = (try? result.get()) != nil }
                done.leave()
            } operation: { object in
                if object.key == "bad" { throw Refused() }
                return try store.insertOnWriter(object)
            }
        }
        held.release()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(outcomes.withLock { $0 } == ["a": true, "bad": false, "c": true])
        #expect(try store.lookup("a") != nil)
        #expect(try store.lookup("bad") == nil)  // taken out of memory again
        #expect(try store.lookup("c") != nil)
        #expect(store.statistics().objects == 2)
        #expect(store.writeFailures == 1)
    }
}

@Suite("Commit delay", .ownThreads)
struct CommitDelayTests {
    static func write(_ key: String, size: Int = 100) -> WriterTask {
        .write(PendingWrite(object: CacheStoreTests.object(key, size: size), context: "test", operation: { _ in true },
                            completion: { _ in }))
    }

    @Test("the mailbox delays writes until a group is full, never a barrier, and asks for one drain of each kind")
    func mailboxDecisions() {
        var mailbox = WriterMailbox()
        func post(_ task: WriterTask, delayed: Bool = true) -> WriterMailbox.Drain {
            mailbox.post(task, delayed: delayed, groupWrites: 3, groupBytes: 1000)
        }
        #expect(post(Self.write("a")) == .later)
        #expect(post(Self.write("b")) == .scheduled)
        #expect(post(Self.write("c")) == .now)  // three writes: a full group goes at once
        #expect(post(Self.write("d")) == .scheduled)
        #expect(mailbox.take().count == 4)
        #expect(post(Self.write("e")) == .later)
        #expect(post(.barrier {}) == .now)  // someone waits for a barrier, and for what came before it
        #expect(post(.barrier {}) == .scheduled)
        #expect(mailbox.take().count == 3)
        #expect(post(Self.write("big", size: 1000)) == .now)  // a full group by bytes
        #expect(mailbox.take().count == 1)
        #expect(post(Self.write("f"), delayed: false) == .now)
        #expect(post(Self.write("g"), delayed: false) == .scheduled)
        #expect(mailbox.take().count == 2)
    }

    @Test("writes within the delay commit in one transaction, a replacement is answered meanwhile, and a purge waits for none of it")
    func delayedGroup() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-delay-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = CacheStore.Configuration(path: directory.appendingPathComponent("cache.sqlite").path)
        configuration.commitDelayMilliseconds = 2000
        let store = try CacheStore(configuration: configuration)
        defer { store.close() }
        let before = store.commits
        let done = DispatchGroup()
        let stored = Mutex(0)
        for key in ["a", "b", "c"] {
            done.enter()
            store.insert(CacheStoreTests.object(key)) { result in
                if (try? result.get()) != nil { stored.withLock { $0 += 1 } }
                done.leave()
            }
        }
        // Within the delay nothing is committed, and a key never stored is not visible yet
        // (the daemon's flight for it answers meanwhile).
        #expect(store.commits == before)
        #expect(try store.lookup("b") == nil)
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(stored.withLock { $0 } == 3)
        #expect(store.commits - before == 1)
        #expect(store.statistics().objects == 3)
        #expect(try store.lookup("b")?.body.array == CacheStoreTests.object("b").body.array)

        // A new version of a stored key is answered at once, before its commit: no reader
        // can get the older one meanwhile.
        let replaced = DispatchSemaphore(value: 0)
        store.insert(CacheStoreTests.object("b", byte: 9)) { _ in replaced.signal() }
        #expect(try store.lookup("b")?.body.array == CacheStoreTests.object("b", byte: 9).body.array)
        #expect(replaced.wait(timeout: .now() + 10) == .success)

        // A purge asked during a delay runs at once, after the writes asked before it.
        let purged = DispatchSemaphore(value: 0)
        let removed = Mutex(-1)
        store.insert(CacheStoreTests.object("d")) { _ in }
        store.purge(nil) { result in
            removed.withLock { $0 = (try? result.get()) ?? -1 }
            purged.signal()
        }
        // Well within the 2 s delay (it would fail if the purge waited for it).
        #expect(purged.wait(timeout: .now() + 1.5) == .success)
        #expect(removed.withLock { $0 } == 4)
        #expect(try store.lookup("d") == nil)
    }
}

@Suite("The key index in front of SQLite")
struct KeyIndexTests {
    @Test("counts rows per hash: a key stays while any row with its hash does")
    func counts() {
        let index = KeyIndex()
        #expect(!index.mayContain("a"))
        index.added("a")
        index.added("a")  // two rows with one hash (a collision, as far as the index knows)
        index.removed(["a"])
        #expect(index.mayContain("a"))
        index.removed(["a", "never-added"])
        #expect(!index.mayContain("a"))
        index.reset(to: ["x", "y"])
        #expect(index.mayContain("x") && index.mayContain("y") && index.count == 2)
    }

    @Test("follows inserts, replacements, purges and eviction, and is loaded again at open")
    func followsTheTable() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-keys-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = CacheStore.Configuration(path: directory.appendingPathComponent("cache.sqlite").path)
        configuration.memoryBytes = 0  // every lookup past the index goes to SQLite
        configuration.maxBytes = 1000
        let store = try CacheStore(configuration: configuration)
        try await store.insert(CacheStoreTests.object("a", size: 300))
        try await store.insert(CacheStoreTests.object("a", size: 200))  // replaced: still one row
        try await store.insert(CacheStoreTests.object("b", size: 300))
        #expect(try store.lookup("a")?.body.count == 200)
        #expect(try store.lookup("b") != nil)
        #expect(try store.lookup("c") == nil)
        #expect(try store.purge("b") == 1)
        #expect(try store.lookup("b") == nil)
        try await store.insert(CacheStoreTests.object("c", size: 600))
        try await store.insert(CacheStoreTests.object("d", size: 600))  // past 1000 bytes: a and c go
        #expect(try store.lookup("a") == nil)
        #expect(try store.lookup("d") != nil)
        store.close()
        let reopened = try CacheStore(configuration: configuration)
        defer { reopened.close() }
        #expect(try reopened.lookup("d") != nil)
        #expect(try reopened.lookup("a") == nil)
        #expect(try reopened.purge(nil) == 1)
        #expect(try reopened.lookup("d") == nil)
    }

    @Test("one store per file: a second open is refused naming the holder, and works once the first closes")
    func oneDaemonPerFile() async throws {
        try await CacheStoreTests.withStore { store, configuration in
            do {
                let second = try CacheStore(configuration: configuration)
                second.close()
                Issue.record("a second store opened the same file")
            } catch let error as FileLock.Held {
                #expect(error.description.contains(configuration.path))
                #expect(error.description.contains("pid \(getpid())"))
            }
            store.close()
            let again = try CacheStore(configuration: configuration)
            again.close()
        }
    }

    @Test("a released lock is free at once, even while a copy of its descriptor lives (a process being spawned)")
    func lockReleasedWithCopies() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-lock-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cache.sqlite").path
        let lock = try FileLock(databasePath: path)
        let copy = lock.withDescriptor { dup($0) }  // what a child holds between fork and exec
        defer { close(copy) }
        #expect(copy >= 0)
        lock.release()
        let again = try FileLock(databasePath: path)
        again.release()
    }

    @Test("a file that is not a database is moved aside, kept, and the store starts empty")
    func damagedFileMovedAside() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("cache.sqlite").path
        let garbage = Data(repeating: 0x5A, count: 8192)
        try garbage.write(to: URL(fileURLWithPath: path))
        let store = try CacheStore(configuration: CacheStore.Configuration(path: path))
        defer { store.close() }
        #expect(store.statistics().objects == 0)
        try await store.insert(CacheStoreTests.object("a"))
        #expect(try store.lookup("a") != nil)
        let aside = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("cache.sqlite.damaged-") }
        #expect(aside.count == 1)
        #expect(try aside.first.map { try Data(contentsOf: directory.appendingPathComponent($0)) } == garbage)
    }

    @Test("a database whose table pages are damaged is moved aside too")
    func damagedPagesMovedAside() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration = CacheStore.Configuration(path: directory.appendingPathComponent("cache.sqlite").path)
        do {
            let store = try CacheStore(configuration: configuration)
            for index in 0..<400 { try await store.insert(CacheStoreTests.object("key-\(index)-" + String(repeating: "k", count: 200), size: 10)) }
            store.close()  // checkpointed: everything is in the main file
        }
        // Every page after the first two (the header and the schema) overwritten: the rows'
        // pages are garbage while the header still says "SQLite format 3".
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: configuration.path))
        let size = try handle.seekToEnd()
        let page: UInt64 = 4096
        #expect(size > 8 * page)
        try handle.seek(toOffset: 2 * page)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: Int(size - 2 * page)))
        try handle.close()
        let store = try CacheStore(configuration: configuration)
        defer { store.close() }
        #expect(store.statistics().objects == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).contains { $0.hasPrefix("cache.sqlite.damaged-") })
    }
}
