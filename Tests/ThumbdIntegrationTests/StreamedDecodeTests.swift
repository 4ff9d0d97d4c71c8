import Foundation
import ThumbdCore
import ThumbdClient
import ThumbdTesting
import Testing
import Thumbnailer

/// A JPEG original of an item a batch shows on screen, downloading slowly, is decoded while
/// it arrives (`thumbnails.streams`), and what comes of it is exactly what the lane makes from
/// the whole body. Nothing else is streamed: not `/thumb` (any page can ask it), not an item
/// off screen. A download cut short gives the download's error, as without it.
@Suite("Decoding an on-screen original while it downloads")
struct StreamedDecodeTests {
    static let thumbnailer = try! Thumbnailer()
    static let tile = ",\"w\":200,\"h\":200,\"fit\":\"cover\",\"format\":\"jpeg\""

    /// The batch's events, once it has ended.
    static func events(of daemon: TestDaemon, _ urls: [String], focus: [Int]) async throws -> [EventStreamParser.Event] {
        let focused = focus.map(String.init).joined(separator: ",")
        let batch = try await daemon.createBatch(urls, extra: "\(tile),\"focus\":[\(focused)]")
        return try await daemon.allEvents(batch.events).parser.events
    }

    /// The tile a `done` event names, from the daemon's cache.
    static func tileBytes(_ daemon: TestDaemon, _ event: EventStreamParser.Event?) async throws -> [UInt8] {
        let src = try #require(event.map(payload)?["src"] as? String)
        let answer = try await request(daemon.port, src)
        #expect(answer.status == 200 && answer[header: "X-Thumbd-Cache"] == "hit")
        return answer.body
    }

    @Test("an on-screen batch item's slow JPEG is decoded while it arrives; its tile is the lane's, byte for byte")
    func sameAsLane() async throws {
        let origin = try TestOrigin()
        let streaming = try TestDaemon()
        let lane = try TestDaemon { $0.thumbnails.streams = 0 }
        defer { streaming.remove(); lane.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("slow.jpg", body.array)
        // 16 KB every 10 ms: about 1.6 MB/s, so the download takes a few hundred ms; its
        // first bytes come 100 ms after the request (the body is tapped when the fetch starts).
        let url = origin.url("/file/slow.jpg?delay=100&chunk=16384&every=10")
        let streamed = try await Self.events(of: streaming, [url], focus: [0])
        let made = try await Self.events(of: lane, [url], focus: [0])
        #expect(streaming.daemon?.thumbnailsStreamed == 1)
        #expect(lane.daemon?.thumbnailsStreamed == 0)
        let streamedTile = try await Self.tileBytes(streaming, streamed.first { $0.type == "done" })
        let laneTile = try await Self.tileBytes(lane, made.first { $0.type == "done" })
        #expect(!streamedTile.isEmpty && streamedTile == laneTile)
        // A second variant of the now cached original is made in the lane.
        let again = try await request(streaming.port, origin.thumb("/file/slow.jpg?chunk=16384&every=10", "&w=100&format=jpeg"))
        #expect(again.status == 200)
        #expect(streaming.daemon?.thumbnailsStreamed == 1 && streaming.daemon?.thumbnailsMade == 2)
        let stats = try await request(streaming.port, "/stats").json
        #expect(stats["thumbnails"] as? Int == 2 && stats["thumbnailsStreamed"] as? Int == 1)
    }

    @Test("/thumb (which any page can ask) and a batch item off screen are made in the lane")
    func onlyOnScreen() async throws {
        let origin = try TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        for name in ["a.jpg", "b.jpg", "c.jpg"] { try await origin.put(name, body.array) }
        let thumb = try await request(daemon.port, origin.thumb("/file/a.jpg?chunk=16384&every=10", "&w=200&h=200&fit=cover&format=jpeg"))
        #expect(thumb.status == 200)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 1)
        let urls = ["b.jpg", "c.jpg"].map { origin.url("/file/\($0)?delay=100&chunk=16384&every=10") }
        let events = try await Self.events(of: daemon, urls, focus: [1])
        #expect(events.filter { $0.type == "done" }.count == 2)
        #expect(daemon.daemon?.thumbnailsStreamed == 1 && daemon.daemon?.thumbnailsMade == 3)
    }

    @Test("a download cut short: the item fails with the download's error, as without streaming, and nothing is made")
    func cutShort() async throws {
        let origin = try TestOrigin()
        let streaming = try TestDaemon()
        let lane = try TestDaemon { $0.thumbnails.streams = 0 }
        defer { streaming.remove(); lane.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("cut.jpg", body.array)
        let url = origin.url("/file/cut.jpg?delay=100&chunk=16384&every=5&cut=\(body.count / 2)")
        let streamed = try await Self.events(of: streaming, [url], focus: [0]).first { $0.type == "failed" }.map(payload)
        let made = try await Self.events(of: lane, [url], focus: [0]).first { $0.type == "failed" }.map(payload)
        let error = try #require(streamed?["error"] as? String)
        #expect(error == made?["error"] as? String)
        #expect(streamed?["status"] as? Int == made?["status"] as? Int)
        #expect(streaming.daemon?.thumbnailsStreamed == 0 && streaming.daemon?.thumbnailsMade == 0)
    }

    @Test("not a JPEG (a PNG), though on screen: made in the lane")
    func notStreamed() async throws {
        let origin = try TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let png = try Self.thumbnailer.testImage(width: 1200, height: 800, format: .png)
        try await origin.put("slow.png", png.array)
        let events = try await Self.events(of: daemon, [origin.url("/file/slow.png?chunk=16384&every=5")], focus: [0])
        #expect(events.filter { $0.type == "done" }.count == 1)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 1)
    }
}
