import Dispatch
import Foundation
import Testing
import HTTPServer
@testable import BlobStore
@testable import ThumbdCore

/// The journal's id reservation with a store whose writer does not answer: appending an event
/// never waits for a commit; readers see only what the reservation covers until it commits.
@Suite("BatchJournal")
struct BatchJournalTests {
    final class NoWaker: StreamWaker, @unchecked Sendable {  // read on the test's thread only
        func wake() {}
    }

    func read(_ subscriber: EventSubscriber) -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while case .data(let n) = buffer.withUnsafeMutableBytes({ subscriber.read(into: $0) }) { out += buffer[..<n] }
        return String(decoding: out, as: UTF8.self)
    }

    func lastID(in text: String) -> Int? {
        text.split(separator: "\n").last { $0.hasPrefix("id: ") }.flatMap { Int($0.dropFirst(4)) }
    }

    @Test("an event past the reservation does not wait for a stalled store; its readers wait until the commit")
    func appendNeverWaitsForTheStore() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-journal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try CacheStore.open(configuration: .init(path: directory.appendingPathComponent("cache.sqlite").path))
        defer { store.close() }
        let stall = DispatchSemaphore(value: 0)
        store.journalWrite("test.stall") { _ in stall.wait() }  // the writer is held: a slow or full disk
        var released = false
        defer { if !released { stall.signal() } }
        let journal = BatchJournal.new(id: "b", store: store)
        let batch = Batch(id: "b", items: [(clientID: nil, url: "http://127.0.0.1:1/a.jpg")],
                          progressInterval: .milliseconds(100), journal: journal)
        let reader = EventStreams(retryMilliseconds: 3000).subscribe(batch.log, lastEventID: nil)
        reader.attach(NoWaker())

        let events = BatchJournal.block + 20
        let started = ContinuousClock.now
        for n in 0..<events { batch.log.append("progress", "{\"index\":0,\"n\":\(n)}") }
        // Before, each event past the reservation waited 2 s for the commit, on the caller's
        // thread: 40 s for these 20. Now they take milliseconds; the bound leaves room for load.
        #expect(ContinuousClock.now - started < .seconds(10))

        // Only the ids the journal had reserved are readable while the store does not answer.
        #expect(lastID(in: read(reader)) == BatchJournal.block - 1)

        stall.signal()
        released = true
        var last: Int?
        let deadline = ContinuousClock.now + .seconds(10)
        while last != events, ContinuousClock.now < deadline {
            last = lastID(in: read(reader)) ?? last
            Thread.sleep(forTimeInterval: 0.005)
        }
        #expect(last == events)  // the rest once the reservation committed
    }
}
