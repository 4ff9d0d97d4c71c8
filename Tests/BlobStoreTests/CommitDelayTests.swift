import Dispatch
import Foundation
import Synchronization
import TestThreads
import Testing
@testable import BlobStore
import Support

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
        let store = try CacheStore.open(configuration: configuration)
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
