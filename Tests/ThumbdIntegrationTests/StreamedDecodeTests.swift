import Foundation
import ThumbdCore
import ThumbdTesting
import Testing
import Thumbnailer

/// A JPEG original that downloads slowly is decoded while it arrives (`thumbnails.streams`),
/// and what comes of it is exactly what the lane makes from the whole body; a download cut
/// short gives the download's error, as without it.
@Suite("Decoding an original while it downloads")
struct StreamedDecodeTests {
    static let thumbnailer = try! Thumbnailer()

    @Test("a slow JPEG is decoded while it arrives; its thumbnail is the lane's, byte for byte")
    func sameAsLane() async throws {
        let origin = try TestOrigin()
        let streaming = try TestDaemon()
        let lane = try TestDaemon { $0.thumbnails.streams = 0 }
        defer { streaming.remove(); lane.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("slow.jpg", body.array)
        // 16 KB every 10 ms: about 1.6 MB/s, so the download takes a few hundred ms.
        let path = origin.thumb("/file/slow.jpg?chunk=16384&every=10", "&w=200&h=200&fit=cover&format=jpeg")
        let streamed = try await request(streaming.port, path)
        let made = try await request(lane.port, path)
        #expect(streamed.status == 200 && made.status == 200)
        #expect(streaming.daemon?.thumbnailsStreamed == 1)
        #expect(lane.daemon?.thumbnailsStreamed == 0)
        #expect(!streamed.body.isEmpty && streamed.body == made.body)
        // A second variant of the now cached original is made in the lane.
        let again = try await request(streaming.port, origin.thumb("/file/slow.jpg?chunk=16384&every=10", "&w=100&format=jpeg"))
        #expect(again.status == 200)
        #expect(streaming.daemon?.thumbnailsStreamed == 1 && streaming.daemon?.thumbnailsMade == 2)
    }

    @Test("a download cut short: the answer is the download's error, as without streaming, and nothing is made")
    func cutShort() async throws {
        let origin = try TestOrigin()
        let streaming = try TestDaemon()
        let lane = try TestDaemon { $0.thumbnails.streams = 0 }
        defer { streaming.remove(); lane.remove(); origin.stop() }
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        try await origin.put("cut.jpg", body.array)
        let path = origin.thumb("/file/cut.jpg?chunk=16384&every=5&cut=\(body.count / 2)", "&w=200&h=200&format=jpeg")
        let streamed = try await request(streaming.port, path)
        let made = try await request(lane.port, path)
        #expect(streamed.status == made.status && streamed.status >= 500, "\(streamed.status) \(made.status)")
        #expect(streamed.json["error"] as? String == made.json["error"] as? String)
        #expect(streaming.daemon?.thumbnailsStreamed == 0 && streaming.daemon?.thumbnailsMade == 0)
    }

    @Test("not a JPEG (a PNG), or a stream with no slot: made in the lane, the same answer")
    func notStreamed() async throws {
        let origin = try TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let png = try Self.thumbnailer.testImage(width: 1200, height: 800, format: .png)
        try await origin.put("slow.png", png.array)
        let answer = try await request(daemon.port, origin.thumb("/file/slow.png?chunk=16384&every=5", "&w=200&format=jpeg"))
        #expect(answer.status == 200)
        #expect(daemon.daemon?.thumbnailsStreamed == 0 && daemon.daemon?.thumbnailsMade == 1)
    }
}
