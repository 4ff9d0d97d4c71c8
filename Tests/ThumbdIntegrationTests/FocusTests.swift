import Foundation
import TestThreads
import Testing
import LoopbackClient
import EventStream
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// What a page says is on screen (`"focus"` in the POST, `POST /batches/<id>/focus`) orders
/// the queues; with `cancelOffscreen`, what left the screen is cancelled and taken up again.
@Suite("Batches: what is on screen first", .ownThreads)
struct FocusTests {
    /// The origin paths of `names`, in the order the origin received them.
    static func order(_ origin: TestOrigin, of names: [String]) async throws -> [String] {
        try await origin.stats().order.filter { names.contains($0) }
    }

    /// One fetch at a time, the slot held by a gated request: the batch's items queue
    /// behind it, in the order focus gives them.
    static func oneAtATime(_ configuration: inout ThumbdConfiguration) {
        configuration.upstream.maxConcurrent = 1
    }

    @Test("focus in the POST starts those items first; POST /focus moves a queued item ahead of them", arguments: ["", ",\"w\":16"])
    func focusOrdersTheUpstreamQueue(thumbnail: String) async throws {
        try await withOriginAndDaemon(Self.oneAtATime) { origin, daemon in
            let blocker = try RawConnection(port: daemon.port)
            try blocker.send("GET", origin.thumb("/gate/slot\(thumbnail.isEmpty ? "o" : "v")"))
            #expect(try await eventually { try await origin.stats().order.contains { $0.hasPrefix("/gate/slot") } })
            let names = (0..<6).map { "/img/f\($0)\(thumbnail.isEmpty ? "o" : "v").jpg" }
            let batch = try await daemon.createBatch(names.map { origin.url($0) }, extra: ",\"focus\":[4]\(thumbnail)")
            let focused = try await request(daemon.port, "/batches/\(batch.id)/focus", method: "POST",
                                            headers: ["Content-Type": "application/json"], body: "{\"items\":[2]}")
            #expect(focused.status == 204)
            let snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
            let flags = (snapshot["items"] as? [[String: Any]] ?? []).map { $0["focused"] as? Bool }
            #expect(flags == [false, false, true, false, false, false])
            try await origin.release("slot\(thumbnail.isEmpty ? "o" : "v")")
            let events = try await daemon.allEvents(batch.events).parser.events
            #expect(events.filter { $0.type == "done" }.count == 6)
            // Item 2 was moved ahead of all. Item 4, queued first by the POST's focus, left the
            // screen before it started: it gave way and waited with the others for the new
            // screen. Whether it goes before or after item 5 depends on whether the others were
            // already released (batches.screenFirstMilliseconds) when it gave way: on a loaded
            // machine they sometimes were, and both orders are right.
            let order = try await Self.order(origin, of: names)
            #expect(Array(order.prefix(4)) == [2, 0, 1, 3].map { names[$0] }, "\(order)")
            #expect(Set(order.suffix(2)) == Set([4, 5].map { names[$0] }), "\(order)")
            #expect(try await blocking { try blocker.read() }.status == 200)
        }
    }

    @Test("a batch larger than the resize queue waits for room: every tile is made, none is busy")
    func batchWaitsForRoom() async throws {
        try await withOriginAndDaemon({
            $0.thumbnails.workers = 1
            $0.thumbnails.maxQueued = 1
        }) { origin, daemon in
            let thumbnailer = try Thumbnailer()
            for index in 0..<12 {
                try await origin.put("room\(index).jpg", thumbnailer.testImage(width: 1200 + 10 * index, height: 900).array)
            }
            let batch = try await daemon.createBatch((0..<12).map { origin.url("/file/room\($0).jpg") }, extra: ",\"w\":48,\"h\":48,\"focus\":[11]")
            let events = try await daemon.allEvents(batch.events).parser.events
            let failed = events.filter { $0.type == "failed" }.map { payload($0)["error"] as? String ?? "?" }
            #expect(failed.isEmpty, "\(failed)")
            #expect(events.filter { $0.type == "done" }.count == 12)
            #expect(daemon.thumbd.thumbnailsMade == 12)
        }
    }

    @Test("a batch that says what is on screen gets progress events for those items only")
    func progressOnScreenOnly() async throws {
        try await withOriginAndDaemon({ $0.batches.progressIntervalMilliseconds = 0 }) { origin, daemon in
            let body = try Thumbnailer().testImage(width: 1200, height: 800).array
            #expect(body.count > 8 * 4096)
            for index in 0..<2 { try await origin.put("p\(index).bin", body) }
            // Each held after its first 4 KB until the stream is open: a stream opened after
            // both were done (a loaded machine took longer than the downloads) has no progress.
            let held = (0..<2).map { origin.url("/file/p\($0).bin?chunk=4096&every=10&hold=p\($0)") }
            let batch = try await daemon.createBatch(held, extra: ",\"focus\":[0]")
            let client = try await blocking { try EventStreamClient(port: daemon.port, path: batch.events) }
            defer { client.close() }
            for index in 0..<2 { try await origin.release("p\(index)") }
            try await blocking { try client.read(seconds: 120) }
            let events = client.parser.events
            #expect(client.closedByServer)
            #expect(events.filter { $0.type == "done" }.count == 2, "\(events.map(\.type))")
            let progress = Set(events.filter { $0.type == "progress" }.compactMap { payload($0)["index"] as? Int })
            #expect(progress == [0])
        }
    }

    @Test("a bad focus is a clear 4xx: an index out of range, not a list, not an object, an unknown batch, a wrong method")
    func badFocus() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let outOfRange = try await request(daemon.port, "/batches", method: "POST", headers: ["Content-Type": "application/json"],
                                               body: "{\"urls\":[\"\(origin.url("/img/x.jpg"))\"],\"focus\":[1]}")
            #expect(outOfRange.status == 400 && outOfRange.json["error"] as? String == "bad_parameter")
            for extra in [#""focus":"all""#, #""focus":[-1]"#, #""cancelOffscreen":1"#, #""inline":"yes""#, #""preview":null"#] {
                let bad = try await request(daemon.port, "/batches", method: "POST", headers: ["Content-Type": "application/json"],
                                            body: "{\"urls\":[\"\(origin.url("/img/x.jpg"))\"],\(extra)}")
                #expect(bad.status == 400 && bad.json["error"] as? String == "bad_parameter", "\(extra): \(bad.status) \(bad.text)")
            }
            let batch = try await daemon.createBatch([origin.url("/img/y.jpg")])
            let cases: [(String, String, String, Int)] = [
                ("POST", "/batches/\(batch.id)/focus", "{\"items\":[5]}", 400),
                ("POST", "/batches/\(batch.id)/focus", "{\"items\":\"all\"}", 400),
                ("POST", "/batches/\(batch.id)/focus", "[]", 400),  // not an object
                ("POST", "/batches/\(batch.id)/focus", "[0]", 400),
                ("POST", "/batches/\(batch.id)/focus", "{}", 400),  // no items
                ("POST", "/batches/0123/focus", "{\"items\":[0]}", 404),
                ("GET", "/batches/\(batch.id)/focus", "", 405),
            ]
            for (method, path, body, status) in cases {
                let answer = try await request(daemon.port, path, method: method, headers: ["Content-Type": "application/json"], body: body)
                #expect(answer.status == status, "\(method) \(path) \(body)")
                #expect(answer.json["error"] is String)
            }
        }
    }

    /// A progress event for item 0 of the stream at `path`, read while the origin holds its download.
    static func progressWhileHeld(_ daemon: TestDaemon, _ path: String, after start: () async throws -> Void) async throws -> Bool {
        let client = try await blocking { try EventStreamClient(port: daemon.port, path: path) }
        defer { client.close() }
        try await start()
        let sawProgress: @Sendable (EventStreamParser) -> Bool = { parser in
            parser.events.contains { $0.type == "progress" && payload($0)["index"] as? Int == 0 }
        }
        try await blocking { try client.read(seconds: 5, until: sawProgress) }
        return sawProgress(client.parser)
    }

    @Test("an item that joins a download already under way, or comes on screen during one, shows its progress at once, though the origin stalls")
    func progressSoFar() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let body = try Thumbnailer().testImage(width: 1200, height: 800).array
            #expect(body.count > 3 * 16384)
            try await origin.put("held.bin", body)
            try await origin.put("other.bin", body)
            // Its first 16 KB, then nothing until the test releases it.
            let held = origin.url("/file/held.bin?chunk=16384&every=10&hold=held")
            let first = try await daemon.createBatch([held], extra: ",\"focus\":[0]")
            #expect(try await Self.progressWhileHeld(daemon, first.events) {})
            // A second batch joins that download: its observer comes after the progress was published.
            let second = try await daemon.createBatch([held], extra: ",\"focus\":[0]")
            #expect(try await Self.progressWhileHeld(daemon, second.events) {}, "the joined item says where the download stands")
            try await origin.release("held")

            // Off screen while its download starts (the screen, item 1, is done at once), so no
            // progress; then it comes on screen while the origin holds the rest.
            let later = origin.url("/file/other.bin?chunk=16384&every=10&hold=later")
            let third = try await daemon.createBatch([later, origin.url("/img/on-screen.jpg")], extra: ",\"focus\":[1]")
            #expect(try await eventually(20) { try await origin.requests("/file/other.bin") == 1 })
            // Its first bytes are in, and published (a transfer publishes at most every 100 ms,
            // and what it held back once curl's next progress call comes, about a second later).
            try await Task.sleep(for: .milliseconds(1500))
            let focused = try await Self.progressWhileHeld(daemon, third.events) {
                let answer = try await request(daemon.port, "/batches/\(third.id)/focus", method: "POST",
                                               headers: ["Content-Type": "application/json"], body: "{\"items\":[0]}")
                #expect(answer.status == 204)
            }
            #expect(focused, "the item that came on screen says where its download stands")
            try await origin.release("later")
            let events = try await daemon.allEvents(third.events).parser.events
            #expect(events.filter { $0.type == "done" }.count == 2, "\(events.map(\.type))")
        }
    }
}
