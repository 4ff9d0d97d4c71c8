import Foundation
import Support
import ThumbdCore
import LoopbackClient
import ThumbdTesting
import Testing
import Thumbnailer

/// A streamed decode that must not happen, or must stop: a cut download, a PNG, a pixel bomb,
/// a stalled body, a cancelled batch.
extension StreamedDecodeTests {
    @Test("a download cut short: the item fails with the download's error, as without streaming, and nothing is made")
    func cutShort() async throws {
        try await Self.withStreamingAndLane { origin, streaming, lane in
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
    }

    @Test("not a JPEG (a PNG), though on screen: made in the lane")
    func notStreamed() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let png = try Self.thumbnailer.testImage(width: 1200, height: 800, format: .png)
        try await origin.put("slow.png", png.array)
        let events = try await Self.events(of: daemon, [origin.url("/file/slow.png?chunk=16384&every=5")], focus: [0])
        #expect(events.filter { $0.type == "done" }.count == 1)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 1)
    }

    /// `body` with its JPEG frame header (SOF0) claiming `width`×`height`.
    static func claiming(_ body: Bytes, width: Int, height: Int) throws -> [UInt8] {
        var bytes = body.array
        let marker: (Int) -> Bool = { bytes[$0] == 0xFF && bytes[$0 + 1] == 0xC0 }
        let sof = try #require((0..<bytes.count - 9).first(where: marker))
        bytes[sof + 5] = UInt8(height >> 8); bytes[sof + 6] = UInt8(height & 0xFF)
        bytes[sof + 7] = UInt8(width >> 8); bytes[sof + 8] = UInt8(width & 0xFF)
        return bytes
    }

    @Test("an on-screen JPEG whose header claims 60000x60000: refused as the lane refuses it, nothing decoded")
    func bombRefused() async throws {
        try await Self.withStreamingAndLane { origin, streaming, lane in
            let body = try Self.thumbnailer.testImage(width: 1200, height: 800)
            try await origin.put("bomb.jpg", Self.claiming(body, width: 60000, height: 60000))
            let url = origin.url("/file/bomb.jpg?delay=100&chunk=16384&every=10")
            let streamed = try await Self.events(of: streaming, [url], focus: [0]).first { $0.type == "failed" }.map(payload)
            let made = try await Self.events(of: lane, [url], focus: [0]).first { $0.type == "failed" }.map(payload)
            #expect(streamed?["status"] as? Int == 422)
            #expect(streamed?["error"] as? String == made?["error"] as? String)
            #expect(streaming.daemon?.thumbnailsStreamed == 0 && streaming.daemon?.streamsRunning == 0)
        }
    }

    @Test("an on-screen download that stalls mid-body: the stream ends with the transfer's low-speed abort, the item fails")
    func stalled() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon { $0.upstream.lowSpeedSeconds = 1 }
        defer { daemon.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("stall.jpg", body.array)
        // 64 KB (the header and more), then nothing for a minute.
        let batch = try await daemon.createBatch([origin.url("/file/stall.jpg?delay=100&chunk=65536&every=60000")],
                                                 extra: "\(Self.tile),\"focus\":[0]")
        #expect(try await eventually(10) { daemon.daemon?.streamsRunning == 1 })
        let started = ContinuousClock.now
        let events = try await daemon.allEvents(batch.events).parser.events
        #expect(events.contains { $0.type == "failed" })
        // Bounded by the transfer's own limits (the low-speed abort and its retries: about 6 s
        // here), not by the stream, which waits for bytes only while the transfer lives.
        #expect(ContinuousClock.now - started < .seconds(20), "\(ContinuousClock.now - started)")
        #expect(try await eventually(5) { daemon.daemon?.streamsRunning == 0 })
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 0)
    }

    @Test("the batch cancelled while its on-screen JPEG streams: the stream stops at once, though a /thumb client keeps the download")
    func cancelledWhileStreaming() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("cancel.jpg", body.array)
        // 64 KB every 100 ms, and the last piece held until the test releases it: the
        // download cannot end before the cancel, however slow the machine (the photo is
        // over 1 MB, so the stream has begun well before that piece).
        #expect(body.count > 1 << 20)
        let path = "/file/cancel.jpg?delay=100&chunk=65536&every=100&tail=last"
        let batch = try await daemon.createBatch([origin.url(path)], extra: "\(Self.tile),\"focus\":[0]")
        #expect(try await eventually(10) { daemon.daemon?.streamsRunning == 1 })
        // A client of the original itself joins the same download.
        let client = Task { try await request(daemon.port, origin.thumb(path)) }
        #expect(try await eventually(30) { daemon.daemon?.waitingRequests == 1 })  // it waits on the download
        #expect(try await request(daemon.port, "/batches/\(batch.id)", method: "DELETE").status == 200)
        // The stream leaves as its batch does, not when the download ends.
        #expect(try await eventually(3) { daemon.daemon?.streamsRunning == 0 })
        try await origin.release("last")
        let original = try await client.value
        #expect(original.status == 200 && original.body == body.array)
        #expect(try await origin.aborted("/file/cancel.jpg") == 0)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 0)
    }
}
