import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing
@testable import BlobStore
import Support

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
            store = try CacheStore.open(configuration: .init(path: directory.appendingPathComponent("cache.sqlite").path))
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
