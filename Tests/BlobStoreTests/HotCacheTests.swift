import Support
import Testing
@testable import BlobStore

/// The memory layer's rules without SQLite: a byte bound, no object over 1/16 of it, and no
/// stale fill after a removal.
@Suite("HotCache")
struct HotCacheTests {
    static func object(_ key: String, size: Int, byte: UInt8 = 1) -> CachedObject {
        CachedObject(key: key, url: "http://example.org/\(key)", status: 200, contentType: "image/png",
                     body: Bytes([UInt8](repeating: byte, count: size)), etag: "\"\(key)\"", fetchedAt: 0, expiresAt: 1)
    }

    @Test("never holds more than its capacity; evicts to make room")
    func bound() {
        let hot = HotCache(capacityBytes: 1600)  // objects up to 100 bytes
        for index in 0..<40 { hot.put(Self.object("k\(index)", size: 100)) }
        #expect(hot.heldBytes <= 1600)
        #expect(hot.heldBytes == 1600)
        #expect(hot.get("k39") != nil)  // the newest is always kept
        #expect((0..<40).filter { hot.get("k\($0)") != nil }.count == 16)
    }

    @Test("an object over 1/16 of the capacity is never kept, and drops an older version")
    func tooLarge() {
        let hot = HotCache(capacityBytes: 1600)
        hot.put(Self.object("a", size: 100))
        hot.put(Self.object("a", size: 101))
        #expect(hot.get("a") == nil)
        #expect(hot.heldBytes == 0)
        hot.fill(Self.object("b", size: 101), readAt: hot.epoch)
        #expect(hot.get("b") == nil)
    }

    @Test("a fill from a read that began before a removal is ignored")
    func staleFill() {
        let hot = HotCache(capacityBytes: 1600)
        let before = hot.epoch
        hot.remove(["x"])  // a purge or an eviction while a reader was in SQLite
        hot.fill(Self.object("x", size: 10), readAt: before)
        #expect(hot.get("x") == nil)
        hot.fill(Self.object("x", size: 10), readAt: hot.epoch)
        #expect(hot.get("x") != nil)
    }

    @Test("put replaces; a fill never overwrites a newer put; removeAll empties")
    func replace() {
        let hot = HotCache(capacityBytes: 1600)
        let epoch = hot.epoch
        hot.put(Self.object("a", size: 10, byte: 2))
        hot.fill(Self.object("a", size: 10, byte: 1), readAt: epoch)
        #expect(hot.get("a")?.body.array.first == 2)
        hot.put(Self.object("a", size: 20, byte: 3))
        #expect(hot.heldBytes == 20)
        hot.removeAll()
        #expect(hot.get("a") == nil && hot.heldBytes == 0)
    }

    @Test("an access a lookup records is taken once, survives its entry leaving or being replaced, and keeps the latest")
    func accesses() {
        let hot = HotCache(capacityBytes: 1600)
        hot.put(Self.object("a", size: 100))
        hot.put(Self.object("b", size: 100))
        #expect(hot.get("missing", accessedAt: 5) == nil)
        #expect(hot.get("a") != nil)  // no access time: nothing recorded
        #expect(hot.takeAccesses().isEmpty)
        #expect(hot.get("a", accessedAt: 5) != nil)
        #expect(hot.get("a", accessedAt: 7) != nil)
        #expect(hot.get("b", accessedAt: 6) != nil)
        #expect(hot.takeAccesses() == ["a": 7, "b": 6])
        #expect(hot.takeAccesses().isEmpty)  // taken once
        // A new version keeps the access; a removed entry's access is still reported.
        #expect(hot.get("a", accessedAt: 8) != nil)
        hot.put(Self.object("a", size: 50))
        #expect(hot.get("b", accessedAt: 9) != nil)
        hot.remove(["b"])
        #expect(hot.takeAccesses() == ["a": 8, "b": 9])
        // Entries pushed out for room keep their accesses too: every access is reported,
        // whichever entries the new ones displaced.
        hot.removeAll()
        for index in 0..<16 { hot.put(Self.object("old\(index)", size: 100)) }
        for index in 0..<16 { #expect(hot.get("old\(index)", accessedAt: Int64(100 + index)) != nil) }
        for index in 0..<16 { hot.put(Self.object("new\(index)", size: 100)) }
        #expect((0..<16).filter { hot.get("old\($0)") != nil }.count < 16)
        #expect(hot.takeAccesses() == Dictionary(uniqueKeysWithValues: (0..<16).map { ("old\($0)", Int64(100 + $0)) }))
        // A fill with an access records it; one that is refused says so.
        #expect(hot.fill(Self.object("c", size: 10), readAt: hot.epoch, accessedAt: 11))
        #expect(!hot.fill(Self.object("d", size: 101), readAt: hot.epoch, accessedAt: 12))
        #expect(hot.takeAccesses() == ["c": 11])
        hot.removeAll()
        #expect(hot.takeAccesses().isEmpty)
    }

    @Test("capacity 0 turns it off")
    func off() {
        let hot = HotCache(capacityBytes: 0)
        hot.put(Self.object("a", size: 0))
        #expect(hot.get("a") == nil)
        #expect(hot.get("a", accessedAt: 1) == nil)
        #expect(hot.takeAccesses().isEmpty)
    }
}
