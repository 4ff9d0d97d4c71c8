import Foundation
import TestThreads
import Testing
import LoopbackClient
import ThumbdCore
import ThumbdTesting

/// `POST /batches/<id>/items`: a page whose elements come and go (a framework's re-render, a
/// virtual list, `<thumbd-img>`) adds them to its running batch, so it keeps one batch and
/// one event stream.
@Suite("Items added to a running batch", .ownThreads)
struct AddedItemsTests {
    static func add(_ daemon: TestDaemon, _ batch: String, _ body: String,
                    headers: [String: String] = ["Content-Type": "application/json"]) async throws -> HTTPResult {
        try await request(daemon.port, "/batches/\(batch)/items", method: "POST", headers: headers, body: body)
    }

    @Test("added items follow on in index, ask what the batch asks, come in its stream and its end; an ended batch refuses more")
    func added() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let batch = try await daemon.createBatch([origin.url("/img/first.jpg"), origin.url("/gate/added")],
                                                 extra: ",\"w\":40,\"h\":40,\"fit\":\"cover\",\"format\":\"png\"")
        let answer = try await Self.add(daemon, batch.id, """
            {"items":[{"url":\(jsonString(origin.url("/img/later.jpg"))),"id":"later"},{"url":"ftp://example.org/x.jpg"},
                      {"url":\(jsonString(origin.url("/png/own.png"))),"w":20}],"focus":[0]}
            """)
        #expect(answer.status == 200, "\(answer.text)")
        let items = try #require(answer.json["items"] as? [[String: Any]])
        #expect(items.compactMap { $0["index"] as? Int } == [2, 3, 4])
        #expect(items.first?["id"] as? String == "later")
        // The batch's own parameters, or the item's where it has its own.
        let src = try #require(items.first?["src"] as? String)
        #expect(src.contains("w=40") && src.contains("format=png"))
        #expect((items.last?["src"] as? String)?.contains("w=20") == true)
        #expect(try await eventually(10) {
            let snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
            return ((snapshot["items"] as? [[String: Any]])?[2]["focused"] as? Bool) == true
        })
        try await origin.release("added")
        let events = try await daemon.allEvents(batch.events).parser.events
        let listed = try #require(events.first { $0.type == "items" })
        #expect(payload(listed)["from"] as? Int == 2)
        #expect(Set(events.filter { $0.type == "done" }.compactMap { payload($0)["index"] as? Int }) == [0, 1, 2, 4])
        let failed = try #require(events.first { $0.type == "failed" })
        #expect(payload(failed)["index"] as? Int == 3 && payload(failed)["status"] as? Int == 400)
        let end = try #require(events.last)
        #expect(end.type == "end" && payload(end)["total"] as? Int == 5 && payload(end)["done"] as? Int == 4)
        let ids = events.compactMap { Int($0.lastEventID) }
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        // The tile of an added item is the variant asked for.
        let done = try #require(events.first { $0.type == "done" && payload($0)["index"] as? Int == 2 })
        let tile = try await request(daemon.port, try #require(payload(done)["src"] as? String))
        #expect(tile.status == 200 && tile[header: "Content-Type"] == "image/png")
        // Ended: 409, and the page opens a new batch.
        let late = try await Self.add(daemon, batch.id, "{\"urls\":[\(jsonString(origin.url("/img/late.jpg")))]}")
        #expect(late.status == 409 && late.json["error"] as? String == "batch_ended")
    }

    @Test("what only a batch's creation may set, a body that is not JSON, too many items, no such batch: refused, the batch runs on")
    func refused() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon { $0.batches.maxItems = 3 }
        defer { daemon.remove(); origin.stop() }
        let batch = try await daemon.createBatch([origin.url("/gate/refused")])
        let one = "{\"urls\":[\(jsonString(origin.url("/img/r.jpg")))]"
        let fixed = try await Self.add(daemon, batch.id, one + ",\"w\":10}")
        #expect(fixed.status == 400 && fixed.json["error"] as? String == "bad_parameter")
        #expect((fixed.json["message"] as? String)?.contains("w applies to the whole batch") == true)
        let typo = try await Self.add(daemon, batch.id, one + ",\"fcous\":[0]}")
        #expect(typo.status == 400 && typo.json["error"] as? String == "unknown_parameter")
        let notJSON = try await Self.add(daemon, batch.id, one + "}", headers: ["Content-Type": "text/plain"])
        #expect(notJSON.status == 415)
        let malformed = try await Self.add(daemon, batch.id, "{\"urls\":")
        #expect(malformed.status == 400 && malformed.json["error"] as? String == "malformed_json")
        let badFocus = try await Self.add(daemon, batch.id, one + ",\"focus\":[1]}")
        #expect(badFocus.status == 400)
        let three = "{\"urls\":[\((0..<3).map { jsonString(origin.url("/img/r\($0).jpg")) }.joined(separator: ","))]}"
        let tooMany = try await Self.add(daemon, batch.id, three)
        #expect(tooMany.status == 413 && tooMany.json["error"] as? String == "too_many_items")
        let missing = try await Self.add(daemon, "ffffffffffffffffffffffffffffffff", one + "}")
        #expect(missing.status == 404 && missing.json["error"] as? String == "batch_not_found")
        let get = try await request(daemon.port, "/batches/\(batch.id)/items")
        #expect(get.status == 405)
        // Nothing of the refused bodies joined the batch.
        let snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
        #expect((snapshot["counts"] as? [String: Any])?["total"] as? Int == 1)
        try await origin.release("refused")
        let events = try await daemon.allEvents(batch.events).parser.events
        #expect(events.last?.type == "end" && payload(events.last!)["total"] as? Int == 1)
    }

    @Test("items added before a restart come back with the batch, at their indices, and are made")
    func restart() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon()
        defer { first.remove(); origin.stop() }
        let batch = try await first.createBatch([origin.url("/gate/kept")], extra: ",\"w\":30,\"format\":\"png\"")
        let added = try await Self.add(first, batch.id, "{\"items\":[{\"url\":\(jsonString(origin.url("/gate/added"))),\"id\":\"held\"}]}")
        #expect(added.status == 200, "\(added.text)")
        #expect(try await eventually { try await origin.requests("/gate/added") == 1 })
        // Its journal rows are written within 50 ms of the event.
        try await Task.sleep(for: .milliseconds(300))
        first.stop()
        let second = try TestDaemon(directory: first.directory)
        defer { second.stop() }
        let snapshot = try await request(second.port, "/batches/\(batch.id)").json
        let items = try #require(snapshot["items"] as? [[String: Any]])
        #expect(items.count == 2 && items[1]["id"] as? String == "held")
        try await origin.release("kept")
        try await origin.release("added")
        let events = try await second.allEvents(batch.events).parser.events
        let done = try #require(events.first { $0.type == "done" && payload($0)["index"] as? Int == 1 })
        #expect((payload(done)["src"] as? String)?.contains("w=30") == true)
        #expect(events.last?.type == "end" && payload(events.last!)["done"] as? Int == 2)
        // Ended after the restart: it takes no more.
        #expect(try await Self.add(second, batch.id, "{\"urls\":[\"x\"]}").status == 409)
    }
}
