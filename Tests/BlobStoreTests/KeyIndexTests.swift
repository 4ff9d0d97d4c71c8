import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing
@testable import BlobStore
import Support

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
        let store = try CacheStore.open(configuration: configuration)
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
        let reopened = try CacheStore.open(configuration: configuration)
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
                let second = try CacheStore.open(configuration: configuration)
                second.close()
                Issue.record("a second store opened the same file")
            } catch let error as FileLock.Held {
                #expect(error.description.contains(configuration.path))
                #expect(error.description.contains("pid \(getpid())"))
            }
            store.close()
            let again = try CacheStore.open(configuration: configuration)
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
        let store = try CacheStore.open(configuration: CacheStore.Configuration(path: path))
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
            let store = try CacheStore.open(configuration: configuration)
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
        let store = try CacheStore.open(configuration: configuration)
        defer { store.close() }
        #expect(store.statistics().objects == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).contains { $0.hasPrefix("cache.sqlite.damaged-") })
    }
}
