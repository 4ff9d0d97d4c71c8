import Dispatch
import Foundation
import Synchronization
import Testing
import Support
import Thumbnailer
import Upstream
import BlobStore
@testable import ThumbdCore

/// The one decision for a key (hit, stale, miss), as a plain function.
@Suite("LookupDecision")
struct LookupDecisionTests {
    static func stored(status: Int = 200, expiresAt: Int64) -> CachedObject {
        CachedObject(key: "k", url: "k", status: status, contentType: "image/png", body: Bytes([1]), etag: "\"e\"",
                     fetchedAt: 0, expiresAt: expiresAt)
    }

    @Test("nothing stored, fresh, negative, stale within grace, expired past grace")
    func decisions() {
        func decide(_ object: CachedObject?, servable: Bool = true) -> String {
            switch LookupDecision.decide(object, now: 100, servableStale: { _ in servable }) {
            case .hit(let object): "hit \(object.status)"
            case .stale: "stale"
            case .miss(let stale): stale == nil ? "miss" : "miss+revalidate"
            }
        }
        #expect(decide(nil) == "miss")
        #expect(decide(Self.stored(expiresAt: 200)) == "hit 200")
        #expect(decide(Self.stored(status: 404, expiresAt: 200)) == "hit 404")  // a negative hit
        #expect(decide(Self.stored(status: 404, expiresAt: 50)) == "miss")  // an expired 404 is not revalidated
        #expect(decide(Self.stored(expiresAt: 50)) == "stale")
        #expect(decide(Self.stored(expiresAt: 50), servable: false) == "miss+revalidate")
    }
}
