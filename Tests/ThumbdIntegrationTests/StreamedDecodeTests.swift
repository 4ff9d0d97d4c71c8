import Foundation
import Support
import TestThreads
import Testing
import LoopbackClient
import EventStream
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// A JPEG original of an item a batch shows on screen, downloading slowly, is decoded while
/// it arrives (`thumbnails.streams`), and what comes of it is exactly what the lane makes from
/// the whole body. Nothing else is streamed: not `/thumb` (any page can ask it), not an item
/// off screen. A download cut short gives the download's error, as without it.
@Suite("Decoding an on-screen original while it downloads", .ownThreads)
struct StreamedDecodeTests {
    static let thumbnailer = try! Thumbnailer()
    static let tile = ",\"w\":200,\"h\":200,\"fit\":\"cover\",\"format\":\"jpeg\""

    /// The batch's events, once it has ended.
    static func events(of daemon: TestDaemon, _ urls: [String], focus: [Int]) async throws -> [EventStreamParser.Event] {
        let focused = focus.map(String.init).joined(separator: ",")
        let batch = try await daemon.createBatch(urls, extra: "\(tile),\"focus\":[\(focused)]")
        return try await daemon.allEvents(batch.events).parser.events
    }

    /// The batch's events, its downloads held before their last chunk (`tail=NAME` in their
    /// URLs) until a stream runs: a body that is whole while its stream is still being
    /// checked goes to the lane, which a loaded machine would otherwise make a coin toss.
    static func streamedEvents(of daemon: TestDaemon, _ urls: [String], focus: [Int], origin: TestOrigin,
                               tail: String) async throws -> [EventStreamParser.Event] {
        async let events = Self.events(of: daemon, urls, focus: focus)
        #expect(try await eventually(20) { daemon.daemon?.streamsRunning == 1 })
        try await origin.release(tail)
        return try await events
    }

    /// An origin, a daemon with its shipped streams, and one with none (whose tiles all come
    /// from the lane): what a stream makes is compared with what the lane makes.
    static func withStreamingAndLane(_ body: (TestOrigin, TestDaemon, TestDaemon) async throws -> Void) async throws {
        let origin = try await TestOrigin()
        let streaming = try TestDaemon()
        let lane = try TestDaemon { $0.thumbnails.streams = 0 }
        defer { streaming.remove(); lane.remove(); origin.stop() }
        try await body(origin, streaming, lane)
    }

    /// The tile a `done` event names, from the daemon's cache.
    static func tileBytes(_ daemon: TestDaemon, _ event: EventStreamParser.Event?) async throws -> [UInt8] {
        let src = try #require(event.map(payload)?["src"] as? String)
        let answer = try await request(daemon.port, src)
        #expect(answer.status == 200 && answer[header: "X-Thumbd-Cache"] == "hit")
        return answer.body
    }

    /// The tile a `done` of `streamed` names is byte for byte the one a `done` of `made` names.
    static func expectSameTile(_ streaming: TestDaemon, _ streamed: [EventStreamParser.Event],
                               _ lane: TestDaemon, _ made: [EventStreamParser.Event]) async throws {
        let streamedTile = try await tileBytes(streaming, streamed.first { $0.type == "done" })
        let laneTile = try await tileBytes(lane, made.first { $0.type == "done" })
        #expect(!streamedTile.isEmpty && streamedTile == laneTile)
    }

    @Test("an on-screen batch item's slow JPEG is decoded while it arrives; its tile is the lane's, byte for byte")
    func sameAsLane() async throws {
        try await Self.withStreamingAndLane { origin, streaming, lane in
            let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
            try await origin.put("slow.jpg", body.array)
            // 16 KB every 10 ms: about 1.6 MB/s, so the download takes a few hundred ms; its
            // first bytes come 100 ms after the request.
            let url = origin.url("/file/slow.jpg?delay=100&chunk=16384&every=10&tail=slow")
            let streamed = try await Self.streamedEvents(of: streaming, [url], focus: [0], origin: origin, tail: "slow")
            let made = try await Self.events(of: lane, [url], focus: [0])
            #expect(streaming.daemon?.thumbnailsStreamed == 1)
            #expect(lane.daemon?.thumbnailsStreamed == 0)
            try await Self.expectSameTile(streaming, streamed, lane, made)
            // A second variant of the now cached original is made in the lane.
            let again = try await request(streaming.port, origin.thumb("/file/slow.jpg?chunk=16384&every=10", "&w=100&format=jpeg"))
            #expect(again.status == 200)
            #expect(streaming.daemon?.thumbnailsStreamed == 1 && streaming.daemon?.thumbnailsMade == 2)
            let stats = try await request(streaming.port, "/stats").json
            #expect(stats["thumbnails"] as? Int == 2 && stats["thumbnailsStreamed"] as? Int == 1)
        }
    }

    @Test("a streamed decode counts toward thumbnails.maxMemoryBytes, as every resize does")
    func streamsShareTheBudget() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        try await origin.put("budget.jpg", Self.thumbnailer.testImage(width: 3000, height: 2000).array)
        let url = origin.url("/file/budget.jpg?delay=100&chunk=16384&every=10&tail=budget")
        async let events = Self.events(of: daemon, [url], focus: [0])
        let thumbd = try #require(daemon.daemon)
        // A stream takes its slot (streamsRunning) a moment before the lane admits its
        // estimate; its last chunk is held, so once admitted it holds the memory until released.
        #expect(try await eventually(20) { thumbd.streamsRunning == 1 && thumbd.resizeMemoryInUse > 0 },
                "the stream's estimate is not in the lane's budget")
        #expect(thumbd.resizesRunning == 0)
        try await origin.release("budget")
        #expect(try await events.contains { $0.type == "done" })
        #expect(try await eventually(5) { thumbd.resizeMemoryInUse == 0 })
        #expect(thumbd.thumbnailsStreamed == 1)
    }

    @Test("/thumb (which any page can ask) and a batch item off screen are made in the lane")
    func onlyOnScreen() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        for name in ["a.jpg", "b.jpg", "c.jpg"] { try await origin.put(name, body.array) }
        let thumb = try await request(daemon.port, origin.thumb("/file/a.jpg?chunk=16384&every=10", "&w=200&h=200&fit=cover&format=jpeg"))
        #expect(thumb.status == 200)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 1)
        let urls = [origin.url("/file/b.jpg?delay=100&chunk=16384&every=10"),
                    origin.url("/file/c.jpg?delay=100&chunk=16384&every=10&tail=c.jpg")]
        let events = try await Self.streamedEvents(of: daemon, urls, focus: [1], origin: origin, tail: "c.jpg")
        #expect(events.filter { $0.type == "done" }.count == 2)
        #expect(daemon.daemon?.thumbnailsStreamed == 1 && daemon.daemon?.thumbnailsMade == 3)
    }

    @Test("an item that comes on screen while its original downloads streams from the body so far; its tile is the lane's")
    func cameOnScreen() async throws {
        try await Self.withStreamingAndLane { origin, streaming, lane in
            let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
            try await origin.put("later.jpg", body.array)
            // Its first 16 KB, then nothing until the test releases it (after the focus); its
            // last chunk waits again, so that the body is not whole before the stream has
            // started (a whole body with its stream still being checked goes to the lane).
            let url = origin.url("/file/later.jpg?chunk=16384&every=10&hold=later&tail=last")
            let batch = try await streaming.createBatch([url], extra: "\(Self.tile),\"focus\":[]")
            let client = try await blocking { try EventStreamClient(port: streaming.port, path: batch.events) }
            defer { client.close() }
            // Its first bytes are in: the origin has the request and writes them at once, then
            // holds; 300 ms later they have reached the daemon.
            #expect(try await eventually(20) { try await origin.requests("/file/later.jpg") == 1 })
            try await Task.sleep(for: .milliseconds(300))
            #expect(streaming.daemon?.streamsRunning == 0)  // off screen at its first bytes
            let focused = try await request(streaming.port, "/batches/\(batch.id)/focus", method: "POST",
                                            headers: ["Content-Type": "application/json"], body: "{\"items\":[0]}")
            #expect(focused.status == 204)
            try await origin.release("later")
            #expect(try await eventually(20) { streaming.daemon?.streamsRunning == 1 })
            try await origin.release("last")
            try await blocking { try client.read(seconds: 30) }
            let events = client.parser.events
            #expect(streaming.daemon?.thumbnailsStreamed == 1)
            let made = try await Self.events(of: lane, [origin.url("/file/later.jpg")], focus: [0])
            try await Self.expectSameTile(streaming, events, lane, made)
        }
    }

    @Test("an on-screen original whose body is whole before a stream slot is free is still decoded as a stream, not in the lane")
    func wholeBeforeSlot() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon { $0.thumbnails.streams = 1 }
        defer { daemon.remove(); origin.stop() }
        try await origin.put("big.jpg", Self.thumbnailer.testImage(width: 3000, height: 2000).array)
        try await origin.put("small.jpg", Self.thumbnailer.testImage(width: 1200, height: 800).array)
        // The large one takes the only slot and is held there after its first 16 KB; the
        // small one starts 300 ms later and trickles in whole while the slot is taken.
        let urls = [origin.url("/file/big.jpg?chunk=16384&every=10&hold=big"),
                    origin.url("/file/small.jpg?delay=300&chunk=16384&every=50")]
        let batch = try await daemon.createBatch(urls, extra: "\(Self.tile),\"focus\":[0,1]")
        let client = try await blocking { try EventStreamClient(port: daemon.port, path: batch.events) }
        defer { client.close() }
        let small: @Sendable (EventStreamParser) -> Bool = { parser in
            parser.events.contains { $0.type == "done" && payload($0)["index"] as? Int == 1 }
        }
        try await blocking { try client.read(seconds: 20, until: small) }
        #expect(small(client.parser))
        #expect(daemon.daemon?.thumbnailsStreamed == 1, "the small one, while the large one holds the slot")
        #expect(daemon.daemon?.thumbnailsMade == 1)  // that one, and nothing from the lane
        try await origin.release("big")
        try await blocking { try client.read(seconds: 30) }
        #expect(client.parser.events.last?.type == "end")
        // The large one too: its first bytes come at once, and on a loaded machine they reached
        // the transfer loop before the body was tapped (it streams from the body so far).
        #expect(daemon.daemon?.thumbnailsStreamed == 2)
    }
}
