import Foundation
import TestThreads
import Testing
import LoopbackClient
import EventStream
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// A batch is kept in the store's journal: after a restart of the daemon its snapshot, its
/// stream and a reconnecting EventSource (`Last-Event-ID`) work as before, and what was not
/// finished is made again. (A SIGKILL mid-batch: scripts/smoke/test_11_batch_restart.sh.)
@Suite("Batches across a restart", .ownThreads)
struct BatchRestartTests {
    static func ids(_ events: [EventStreamParser.Event]) -> [Int] { events.compactMap { Int($0.lastEventID) } }

    @Test("an unfinished batch: snapshot and stream come back, Last-Event-ID resumes with no gap or duplicate, the rest is made")
    func unfinishedBatch() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon()
        defer { first.remove(); origin.stop() }
        let urls = (0..<3).map { origin.url("/img/restart\($0).jpg") } + [origin.url("/gate/restart")]
        let batch = try await first.createBatch(urls)
        // A subscriber reads until the three quick items are done, then the daemon restarts.
        let partial = try await blocking {
            let client = try EventStreamClient(port: first.port, path: batch.events)
            try client.read(seconds: 20) { parser in parser.events.filter { $0.type == "done" }.count == 3 }
            client.close()
            return client
        }
        let lastSeen = try #require(Int(partial.parser.lastEventID))
        #expect(try await eventually { try await origin.requests("/gate/restart") == 1 })
        first.stop()

        let second = try TestDaemon(directory: first.directory)
        defer { second.stop() }
        let snapshot = try await request(second.port, "/batches/\(batch.id)")
        #expect(snapshot.status == 200)
        let counts = snapshot.json["counts"] as? [String: Any]
        #expect(counts?["done"] as? Int == 3 && counts?["total"] as? Int == 4, "\(snapshot.text)")
        #expect(snapshot.json["state"] as? String == "running")
        try await origin.release("restart")
        let resumed = try await second.allEvents(batch.events, lastEventID: String(lastSeen)).parser.events
        let done = resumed.filter { $0.type == "done" }.compactMap { payload($0)["index"] as? Int }
        #expect(done == [3], "\(resumed.map(\.type))")  // no item twice, none missing
        #expect(resumed.last?.type == "end")
        #expect(payload(resumed.last!)["done"] as? Int == 4)
        #expect(Self.ids(resumed).allSatisfy { $0 > lastSeen })
        // From the start: every event once, ids increasing across the restart.
        let whole = try await second.allEvents(batch.events).parser.events
        #expect(whole.filter { $0.type == "done" }.compactMap { payload($0)["index"] as? Int }.sorted() == [0, 1, 2, 3])
        #expect(zip(Self.ids(whole), Self.ids(whole).dropFirst()).allSatisfy { $0 < $1 })
        #expect(!whole.contains { $0.type == "failed" })  // the shutdown's abort is not an outcome
        // The quick items came from before the restart; the held one was fetched again.
        #expect(try await origin.requests("/img/restart0.jpg") == 1)
        #expect(try await origin.requests("/gate/restart") == 2)
    }

    @Test("a stream open at shutdown gets a shutdown event without an id before it ends; its reconnect resumes after a restart")
    func shutdownEvent() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon()
        defer { first.remove(); origin.stop() }
        let batch = try await first.createBatch([origin.url("/img/bye0.jpg"), origin.url("/gate/bye")])
        let client = try await blocking { try EventStreamClient(port: first.port, path: batch.events) }
        try await blocking { try client.read(seconds: 20) { $0.events.contains { $0.type == "done" } } }
        #expect(try await eventually { try await origin.requests("/gate/bye") == 1 })
        async let stopped: Void = blocking { first.stop() }
        try await blocking { try client.read(seconds: 20) }  // to the end of the body
        try await stopped
        let farewell = try #require(client.parser.events.last)
        #expect(farewell.type == "shutdown")
        #expect(farewell.data.contains("reconnect"))
        let lastID = try #require(client.parser.events.last { $0.type == "done" }?.lastEventID)
        #expect(farewell.lastEventID == lastID)  // no id of its own: a reconnect resumes after the log's last
        // The reconnect EventSource makes, with Last-Event-ID, finds the batch after the restart.
        let second = try TestDaemon(directory: first.directory)
        defer { second.stop() }
        try await origin.release("bye")
        let resumed = try await blocking {
            let again = try EventStreamClient(port: second.port, path: batch.events, lastEventID: lastID)
            try again.read(seconds: 20)
            return again
        }
        #expect(resumed.parser.events.last?.type == "end")
        #expect(!resumed.parser.events.contains { $0.type == "done" && $0.data.contains("\"index\":0") })
    }

    @Test("a finished batch: the same events with the same ids after a restart; past its retention, 404")
    func finishedBatch() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon()
        defer { first.remove(); origin.stop() }
        let batch = try await first.createBatch([origin.url("/img/kept0.jpg"), origin.url("/status/404")])
        let before = try await first.allEvents(batch.events).parser.events
        #expect(before.last?.type == "end")
        first.stop()

        let second = try TestDaemon(directory: first.directory)
        let after = try await second.allEvents(batch.events).parser.events
        #expect(after.map(\.lastEventID) == before.filter { $0.type != "progress" }.map(\.lastEventID))
        #expect(after.map(\.data) == before.filter { $0.type != "progress" }.map(\.data))
        let snapshot = try await request(second.port, "/batches/\(batch.id)")
        #expect(snapshot.json["state"] as? String == "finished")
        second.stop()

        let third = try TestDaemon(directory: first.directory) { $0.batches.retentionSeconds = 0 }
        defer { third.stop() }
        #expect(try await request(third.port, "/batches/\(batch.id)").status == 404)
    }

    @Test("journals stay within the kept batches: one dropped from memory (maxKept) is gone after a restart; inline images are not journaled")
    func journalsFollowTheKeptBatches() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon { $0.batches.maxKept = 1 }
        defer { first.remove(); origin.stop() }
        let thumbnailer = try Thumbnailer()
        try await origin.put("kept.jpg", thumbnailer.testImage(width: 300, height: 200).array)
        var ids: [String] = []
        for round in 0..<3 {  // the third POST prunes the first batch (two finished, one kept)
            let batch = try await first.createBatch([origin.url("/file/kept.jpg?r=\(round)")], extra: ",\"w\":32,\"inline\":true")
            let events = try await first.allEvents(batch.events).parser.events
            #expect(events.contains { $0.type == "done" && payload($0)["inline"] is String })
            ids.append(batch.id)
        }
        first.stop()

        let second = try TestDaemon(directory: first.directory) { $0.batches.maxKept = 1 }
        defer { second.stop() }
        #expect(try await request(second.port, "/batches/\(ids[0])").status == 404)
        let kept = try await second.allEvents("/batches/\(ids[2])/events").parser.events
        let done = try #require(kept.first { $0.type == "done" }, "\(kept.map { "\($0.lastEventID) \($0.type) \($0.data.prefix(120))" })")
        #expect(payload(done)["inline"] == nil && payload(done)["src"] is String)  // src answers the same bytes
    }
}
