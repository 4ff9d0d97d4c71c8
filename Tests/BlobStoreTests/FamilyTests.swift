import Foundation
import Testing
@testable import BlobStore
import Support

/// An original (its key is its URL) and its variants (their `url` is the original's) are
/// one family: purged, evicted and replaced by other bytes together.
@Suite("CacheStore families")
struct FamilyTests {
    static let url = "http://example.org/a.jpg"

    static func original(etag: String = "\"v1\"", size: Int = 1_000, url: String = url) -> CachedObject {
        CachedObject(key: url, url: url, status: 200, contentType: "image/jpeg",
                     body: Bytes([UInt8](repeating: 1, count: size)), etag: etag, fetchedAt: 1, expiresAt: 2)
    }

    static func variant(_ width: Int, of original: CachedObject, size: Int = 100) -> CachedObject {
        CachedObject(key: "\(original.url)#thumb:w=\(width)", url: original.url, status: 200, contentType: "image/jpeg",
                     body: Bytes([UInt8](repeating: 2, count: size)), etag: "\"t\(width)\"", upstreamETag: original.etag,
                     fetchedAt: 1, expiresAt: 2)
    }

    @Test("purging a URL purges every variant made from it, and no other URL's")
    func purge() async throws {
        try await CacheStoreTests.withStore { store, _ in
            let original = Self.original()
            let other = Self.original(url: "http://example.org/b.jpg")
            for object in [original, Self.variant(64, of: original), Self.variant(128, of: original), other, Self.variant(64, of: other)] {
                try await store.insert(object)
            }
            _ = try store.lookup(Self.variant(64, of: original).key)  // in the memory layer too
            #expect(try store.purge(Self.url) == 3)
            #expect(try store.lookup(Self.variant(64, of: original).key) == nil)
            #expect(try store.lookup(Self.variant(128, of: original).key) == nil)
            #expect(try store.lookup(Self.variant(64, of: other).key) != nil)
            #expect(store.statistics().objects == 2)
        }
    }

    @Test("new bytes for an original drop the variants made from the old ones; the same bytes keep them")
    func replaced() async throws {
        try await CacheStoreTests.withStore { store, _ in
            let first = Self.original()
            try await store.insert(first)
            try await store.insert(Self.variant(64, of: first))
            try await store.insert(Self.original())  // the same bytes again (a refetch): kept
            #expect(try store.lookup(Self.variant(64, of: first).key) != nil)
            let changed = Self.original(etag: "\"v2\"")
            try await store.insert(changed)
            #expect(try store.lookup(Self.variant(64, of: first).key) == nil)
            #expect(store.statistics() == .init(objects: 1, bytes: 1_000, evictions: 0))
            try await store.insert(Self.variant(64, of: changed))  // made from the new bytes: stays
            try await store.insert(Self.original(etag: "\"v2\""))
            #expect(try store.lookup(Self.variant(64, of: changed).key) != nil)
        }
    }

    @Test("an evicted original takes its variants; the totals stay true")
    func evicted() async throws {
        try await CacheStoreTests.withStore(maxBytes: 1 << 20) { store, _ in
            let old = Self.original(size: 400_000, url: "http://example.org/old.jpg")
            try await store.insert(old)
            try await store.insert(Self.variant(64, of: old, size: 1_000))
            try await Task.sleep(for: .milliseconds(5))
            store.recordAccess(Self.variant(64, of: old).key)  // the variant is read: only the original is the LRU
            try await Task.sleep(for: .milliseconds(50))
            try await store.insert(Self.original(size: 400_000, url: "http://example.org/new.jpg"))
            try await store.insert(Self.original(size: 400_000, url: "http://example.org/newer.jpg"))
            #expect(try store.lookup(old.key) == nil)
            #expect(try store.lookup(Self.variant(64, of: old).key) == nil)
            #expect(store.statistics().objects == 2)
            #expect(store.statistics().bytes == 800_000)
        }
    }
}
