import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing
@testable import BlobStore
import Support

@Suite("CacheStore on a real SQLite file")
struct CacheStoreTests {
    static func withStore(maxBytes: Int64 = 1 << 30, memoryBytes: Int = 64 << 20,
                          _ body: (CacheStore, CacheStore.Configuration) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = CacheStore.Configuration(path: directory.appendingPathComponent("sub/cache.sqlite").path)
        configuration.maxBytes = maxBytes
        configuration.memoryBytes = memoryBytes
        configuration.accessFlushMilliseconds = 10
        let store = try CacheStore.open(configuration: configuration)
        defer { store.close() }
        try await body(store, configuration)
    }

    static func object(_ key: String, size: Int = 100, byte: UInt8 = 7) -> CachedObject {
        CachedObject(key: key, url: "http://example.org/\(key)", status: 200, contentType: "image/jpeg",
                     body: Bytes([UInt8](repeating: byte, count: size)), etag: "\"\(key)\"", upstreamETag: "\"up\"",
                     lastModified: "Tue, 14 Nov 2023 22:13:20 GMT", fetchedAt: 1, expiresAt: 2)
    }

    /// Each a few milliseconds after the one before, so that their times order them.
    static func insertInTurn(_ keys: [String], size: Int, into store: CacheStore) async throws {
        for (index, key) in keys.enumerated() {
            if index > 0 { try await Task.sleep(for: .milliseconds(5)) }
            try await store.insert(Self.object(key, size: size))
        }
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
            let reopened = try CacheStore.open(configuration: configuration)
            defer { reopened.close() }
            #expect(try reopened.lookup("a")?.body.count == 50)
            #expect(reopened.statistics().bytes == 50)
        }
    }

    @Test("past the size limit the least recently used objects go first")
    func eviction() async throws {
        try await Self.withStore(maxBytes: 1 << 20) { store, _ in
            let size = 300_000
            try await Self.insertInTurn(["old", "used", "new"], size: size, into: store)
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

    @Test("a lookup with an access time counts as a use for the LRU order, from memory or from SQLite",
          arguments: [64 << 20, 0])
    func lookupRecordsAccess(memoryBytes: Int) async throws {
        try await Self.withStore(maxBytes: 1 << 20, memoryBytes: memoryBytes) { store, _ in
            let size = 300_000
            try await Self.insertInTurn(["old", "used", "new"], size: size, into: store)
            #expect(try store.lookup("old") != nil)  // no access time: not a use (and now in memory, if kept)
            #expect(try store.lookup("used") != nil)
            try await Task.sleep(for: .milliseconds(5))
            // Read twice: the first from SQLite (or memory), the second from memory when it is on.
            #expect(try store.lookup("old", accessedAt: CacheStore.nowMilliseconds()) != nil)
            try await Task.sleep(for: .milliseconds(2))
            #expect(try store.lookup("old", accessedAt: CacheStore.nowMilliseconds()) != nil)
            try await Task.sleep(for: .milliseconds(50))  // let the access batch flush
            try await store.insert(Self.object("newest", size: size))
            #expect(try store.lookup("used") == nil)
            #expect(try store.lookup("old") != nil)
            #expect(try store.lookup("newest") != nil)
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
