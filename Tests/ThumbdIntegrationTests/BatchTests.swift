import Foundation
import ThumbdCore
import ThumbdTesting
import LoopbackClient
import EventStream
import Support
import Testing

/// Helpers shared by the batch tests.
extension TestDaemon {
    /// POSTs a batch of origin URLs (plain strings are used as given) and returns its id.
    func createBatch(_ urls: [String], extra: String = "") async throws -> (id: String, events: String) {
        let items = urls.enumerated().map { "{\"url\":\(jsonString($0.element)),\"id\":\"tile-\($0.offset)\"}" }
        let result = try await request(port, "/batches", method: "POST", headers: json, body: "{\"items\":[\(items.joined(separator: ","))]\(extra)}")
        guard result.status == 201, let id = result.json["id"] as? String, let events = result.json["events"] as? String else {
            throw HTTPTestError(description: "POST /batches answered \(result.status): \(result.text)")
        }
        return (id, events)
    }

    /// A daemon that takes batches whose events outgrow what loopback sockets buffer.
    /// Settings for a daemon that takes 800-item batches.
    static func forFloods(_ configuration: inout ThumbdConfiguration) {
        configuration.server.maxBodyBytes = 4 << 20
    }

    /// 800 items, all one URL waiting at the origin's `gate`: one fetch, whose completion
    /// brings 800 done events at once while the streams are open. The long URL makes each
    /// ~8 KB (url and src): some 6 MB in all, more than loopback sockets buffer for a reader
    /// that does not read.
    func createFloodBatch(origin: TestOrigin, gate: String) async throws -> (id: String, events: String) {
        let url = origin.url("/gate/\(gate)?pad=" + String(repeating: "p", count: 3800))
        return try await createBatch(Array(repeating: url, count: 800))
    }

    /// Subscribes and reads the whole stream (until the server closes it).
    func allEvents(_ path: String, lastEventID: String? = nil) async throws -> EventStreamClient {
        try await blocking {
            let client = try EventStreamClient(port: self.port, path: path, lastEventID: lastEventID)
            try client.read()
            client.close()
            return client
        }
    }
}

func jsonString(_ text: String) -> String {
    String(decoding: try! JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
}

func payload(_ event: EventStreamParser.Event) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any]) ?? [:]
}

@Suite("Batches and their event streams")
struct BatchTests {
    @Test("a batch streams one done per good item, failed with the right status, increasing ids, end, then closes")
    func endToEnd() async throws {
        try await withOriginAndDaemon({ $0.upstream.allowHosts = ["127.0.0.1"] }) { origin, daemon in
            let urls = [origin.url("/img/b1.jpg"), origin.url("/png/b2.png"), origin.url("/slow?size=30000&chunk=3000&every=200"),  // ~2 s: two progress events even on a loaded machine
                        origin.url("/status/404"), origin.url("/not-an-image"), "ftp://example.org/x.jpg",
                        "http://localhost:\(origin.port)/img/b3.jpg"]
            let batch = try await daemon.createBatch(urls)
            let stream = try await daemon.allEvents(batch.events)
            #expect(stream.status == 200)
            #expect(stream.headers["content-type"]?.hasPrefix("text/event-stream") == true)
            #expect(stream.headers["transfer-encoding"] == "chunked")
            #expect(stream.closedByServer)
            #expect(stream.parser.retry == 3000)
            let events = stream.parser.events
            let ids = events.compactMap { Int($0.lastEventID) }
            #expect(ids.count == events.count)
            #expect(ids == Array(1...events.count))
            #expect(events.last?.type == "end")
            #expect(events.filter { $0.type == "end" }.count == 1)
            let done = events.filter { $0.type == "done" }.map(payload)
            #expect(Set(done.compactMap { $0["index"] as? Int }) == [0, 1, 2])
            #expect(done.allSatisfy { $0["status"] as? Int == 200 && $0["cache"] as? String == "miss" })
            #expect(done.first { $0["index"] as? Int == 0 }?["id"] as? String == "tile-0")
            let failed = Dictionary(uniqueKeysWithValues: events.filter { $0.type == "failed" }.map(payload).map {
                ($0["index"] as! Int, ($0["status"] as! Int, $0["error"] as! String))
            })
            #expect(failed[3]! == (404, "upstream_not_found"))
            #expect(failed[4]! == (415, "not_an_image"))
            #expect(failed[5]! == (400, "unsupported_scheme"))
            #expect(failed[6]! == (403, "host_not_allowed"))
            let slowProgress = events.filter { $0.type == "progress" }.map(payload).filter { $0["index"] as? Int == 2 }
            #expect(slowProgress.count >= 2)
            #expect(slowProgress.allSatisfy { $0["total"] as? Int == 30000 })
            let end = payload(events.last!)
            #expect(end["total"] as? Int == 7 && end["done"] as? Int == 3 && end["failed"] as? Int == 4 && end["cancelled"] as? Int == 0)
            // done.src is answered from the cache.
            for event in done {
                let src = try #require(event["src"] as? String)
                let image = try await request(daemon.port, src)
                #expect(image.status == 200)
                #expect(image[header: "X-Thumbd-Cache"] == "hit")
            }
            let snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
            #expect(snapshot["state"] as? String == "finished")
            #expect((snapshot["counts"] as? [String: Int])?["done"] == 3)
        }
    }

    @Test("a batch item whose origin fails gets the expired copy, as /thumb does (stale-if-error)")
    func staleIfError() async throws {
        // Without grace: an expired copy is not answered before the origin was asked.
        try await withOriginAndDaemon({ $0.store.graceSeconds = 0 }) { origin, daemon in
            let url = origin.url("/img/old.jpg?cc=max-age%3D0")
            let fresh = try await request(daemon.port, origin.thumb("/img/old.jpg?cc=max-age%3D0"))
            #expect(fresh[header: "X-Thumbd-Cache"] == "miss")
            // The expired copy is the stored one: under the whole suite the commit can come
            // seconds after the answer, and a batch before it finds nothing stale.
            #expect(try await eventually { daemon.thumbd.store.statistics().objects == 1 })
            origin.stop()  // the origin goes away: connection refused
            let batch = try await daemon.createBatch([url])
            let events = try await daemon.allEvents(batch.events).parser.events
            let done = try #require(events.first { $0.type == "done" }.map(payload))
            #expect(done["status"] as? Int == 200)
            #expect(done["cache"] as? String == "stale")
            #expect(done["bytes"] as? Int == fresh.body.count)
            #expect(events.contains { $0.type == "failed" } == false)
        }
    }

    @Test("a subscriber after the end gets every event; Last-Event-ID resumes with no gap and no duplicate")
    func replayAndResume() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let batch = try await daemon.createBatch((0..<5).map { origin.url("/img/r\($0).jpg") } + [origin.url("/status/500")])
            let first = try await daemon.allEvents(batch.events)
            let late = try await daemon.allEvents(batch.events)
            #expect(late.parser.events == first.parser.events)
            #expect(late.parser.events.last?.type == "end")
            for cut in [1, 3, first.parser.events.count - 1] {
                let resumed = try await daemon.allEvents(batch.events, lastEventID: String(cut))
                #expect(resumed.parser.events == Array(first.parser.events.dropFirst(cut)))
            }
        }
    }

    @Test("a subscriber that drops mid-batch resumes with Last-Event-ID: no gap, no duplicate")
    func reconnectMidBatch() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let batch = try await daemon.createBatch([origin.url("/img/m1.jpg"), origin.url("/gate/mid"), origin.url("/img/m2.jpg")])
            let partial = try await blocking { () -> EventStreamClient in
                let client = try EventStreamClient(port: daemon.port, path: batch.events)
                try client.read(seconds: 10) { $0.events.filter { $0.type == "done" }.count == 2 }  // then the gate holds
                client.close()
                return client
            }
            #expect(partial.parser.events.filter { $0.type == "done" }.count == 2)
            #expect(!partial.closedByServer)
            try await origin.release("mid")
            let rest = try await daemon.allEvents(batch.events, lastEventID: partial.parser.lastEventID)
            let full = try await daemon.allEvents(batch.events)
            #expect(partial.parser.events + rest.parser.events == full.parser.events)
            #expect(rest.parser.events.first?.lastEventID == String(Int(partial.parser.lastEventID)! + 1))
        }
    }

    @Test("DELETE cancels the batch; a /thumb client waiting on one of its URLs still gets the image")
    func cancelKeepsSharedTransfer() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let batch = try await daemon.createBatch([origin.url("/gate/shared"), origin.url("/gate/alone")])
            let thumbClient = try RawConnection(port: daemon.port)
            try thumbClient.send("GET", origin.thumb("/gate/shared"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
            #expect(try await eventually { try await origin.requests("/gate/shared") == 1 })
            #expect(try await eventually { try await origin.requests("/gate/alone") == 1 })
            let cancelled = try await request(daemon.port, "/batches/\(batch.id)", method: "DELETE")
            #expect(cancelled.status == 200)
            let events = try await daemon.allEvents(batch.events).parser.events
            #expect(events.filter { $0.type == "cancelled" }.count == 2)
            #expect(payload(events.last!)["cancelled"] as? Int == 2)
            #expect(try await eventually { try await origin.aborted("/gate/alone") == 1 })  // nobody else wanted it
            try await origin.release("shared")
            let image = try await blocking { try thumbClient.read() }
            #expect(image.status == 200)
            #expect(try await origin.aborted("/gate/shared") == 0)
        }
    }

    @Test("a subscriber hanging up does not cancel the batch; many subscribers see the same events")
    func subscribersComeAndGo() async throws {
        try await withOriginAndDaemon({ $0.batches.keepaliveSeconds = 3600 }) { origin, daemon in  // no write to notice a hang-up by
            let batch = try await daemon.createBatch([origin.url("/gate/sub"), origin.url("/img/s.jpg")])
            let leaver = try await blocking { try EventStreamClient(port: daemon.port, path: batch.events) }
            let readers = try await blocking { try (0..<20).map { _ in try EventStreamClient(port: daemon.port, path: batch.events) } }
            #expect(try await eventually { daemon.thumbd.openEventStreams == 21 })
            leaver.close()
            #expect(try await eventually { daemon.thumbd.openEventStreams == 20 })  // noticed at once, not at the next write
            try await origin.release("sub")
            let streams = try await blocking { () -> [[EventStreamParser.Event]] in
                try readers.map { reader in
                    try reader.read()
                    reader.close()
                    return reader.parser.events
                }
            }
            #expect(streams.allSatisfy { $0 == streams[0] })
            #expect(payload(streams[0].last!)["done"] as? Int == 2)
            #expect(try await eventually { daemon.thumbd.openEventStreams == 0 })
        }
    }

    @Test("a subscriber that does not read loses nothing and does not hold the other streams open")
    func slowReader() async throws {
        try await withOriginAndDaemon(TestDaemon.forFloods) { origin, daemon in
            let batch = try await daemon.createFloodBatch(origin: origin, gate: "slow-reader")
            let slow = try await blocking {
                try EventStreamClient(port: daemon.port, path: batch.events, receiveBuffer: 64 * 1024)
            }
            let reader = try await blocking { try EventStreamClient(port: daemon.port, path: batch.events) }
            #expect(try await eventually { daemon.thumbd.openEventStreams == 2 })
            try await origin.release("slow-reader")
            // The other subscriber gets everything and its stream closes while the slow one has
            // read nothing (at most a second later: see EventLog.closeGrace).
            try await blocking { try reader.read(seconds: 30) }
            let events = reader.parser.events
            #expect(reader.closedByServer)
            #expect(payload(events.last!)["done"] as? Int == 800)
            // Only now does the slow reader read: everything, in order, once, then the close.
            try await blocking { try slow.read(seconds: 30) }
            #expect(slow.closedByServer)
            #expect(slow.parser.events == events)
            #expect(slow.parser.events.compactMap { Int($0.lastEventID) } == Array(1...events.count))
            #expect(try await eventually { daemon.thumbd.openEventStreams == 0 })
        }
    }

    @Test("idle streams get keepalive comments")
    func keepalive() async throws {
        try await withOriginAndDaemon({ $0.batches.keepaliveSeconds = 0.1 }) { origin, daemon in
            let batch = try await daemon.createBatch([origin.url("/gate/idle")])
            let client = try await blocking { () -> EventStreamClient in
                let client = try EventStreamClient(port: daemon.port, path: batch.events)
                try client.read(seconds: 5) { $0.comments.count >= 3 }
                return client
            }
            #expect(client.parser.comments.filter { $0 == " keepalive" }.count >= 3)
            #expect(client.parser.events.isEmpty)
            try await origin.release("idle")
            try await blocking { try client.read() }
            #expect(client.parser.events.last?.type == "end")
        }
    }
}
