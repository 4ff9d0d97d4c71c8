import EventStream
import Foundation
import Support
import ThumbdCore
import Testing
import LoopbackClient
import ThumbdTesting
import Thumbnailer

/// Thumbnails a batch makes: previews before the tile, tiles inside the stream, an item's own
/// parameters over the batch's.
extension ThumbnailTests {
    @Test("previews: made from the tile's own decode and sent before its done; stored, so a warm batch sends them in done and makes none")
    func batch() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("b1.jpg", Self.thumbnailer.testImage(width: 1000, height: 700).array)
            try await origin.put("b2.jpg", Self.thumbnailer.testImage(width: 700, height: 1000).array)
            let body = "{\"urls\":[\"\(origin.url("/file/b1.jpg"))\",\"\(origin.url("/file/b2.jpg"))\"],\"w\":120,\"h\":120,\"preview\":true}"
            let cold = try await Self.batchEvents(daemon, body)
            let done = cold.filter { $0.type == "done" }
            #expect(done.count == 2)
            let made = try Self.previews(cold)
            #expect(made.count == 2)
            for (_, preview) in made {
                #expect(preview.event && preview.beforeDone)  // cold: its own event, ahead of done
                #expect(preview.uri.hasPrefix("data:image/webp;base64,") && preview.uri.utf8.count <= 600)
                let bytes = try #require(Data(base64Encoded: String(preview.uri.dropFirst("data:image/webp;base64,".count))))
                let header = try Self.thumbnailer.header(of: Bytes(Array(bytes)))
                #expect(max(header.width, header.height) == 16)
            }
            for event in done {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
                let src = try #require(object["src"] as? String)
                #expect(src.contains("&w=120&h=120"))
                let tile = try await request(daemon.port, src)
                #expect(tile[header: "X-Thumbd-Cache"] == "hit")
                #expect(try (Self.header(tile).width, Self.header(tile).height) == (120, 120))
            }
            // Warm, once the store has committed what the cold batch made (two originals, two
            // tiles, two previews; the tiles are answered before their commit): every done
            // carries its stored preview; none is made again.
            #expect(try await eventually(10) { daemon.thumbd.store.statistics().objects == 6 })
            let warm = try await Self.batchEvents(daemon, body)
            let stored = try Self.previews(warm)
            #expect(stored.count == 2 && stored.values.allSatisfy { !$0.event })
            #expect(Set(stored.values.map(\.uri)) == Set(made.values.map(\.uri)))
            #expect(warm.filter { $0.type == "done" }.allSatisfy { (payload($0)["cache"] as? String) == "hit" })
        }
    }

    @Test("inline: a done whose tile is at most batches.maxInlineBytes carries it as a data URI, the same bytes src answers")
    func inline() async throws {
        try await withOriginAndDaemon({ $0.batches.maxInlineBytes = 4096 }) { origin, daemon in
            try await origin.put("i1.jpg", Self.thumbnailer.testImage(width: 900, height: 600).array)
            let url = origin.url("/file/i1.jpg")
            let events = try await Self.batchEvents(daemon, "{\"items\":[{\"url\":\"\(url)\"},{\"url\":\"\(url)\",\"w\":600,\"h\":400}],\"w\":64,\"h\":64,\"format\":\"jpeg\",\"inline\":true}")
            let done = events.filter { $0.type == "done" }.map(payload).sorted { ($0["index"] as? Int ?? 0) < ($1["index"] as? Int ?? 0) }
            #expect(done.count == 2)
            let small = try #require(done.first)
            let uri = try #require(small["inline"] as? String)
            #expect(uri.hasPrefix("data:image/jpeg;base64,"))
            let tile = try await request(daemon.port, try #require(small["src"] as? String))
            #expect(Data(base64Encoded: String(uri.dropFirst("data:image/jpeg;base64,".count))) == Data(tile.body))
            #expect((done.last?["bytes"] as? Int ?? 0) > 4096 && done.last?["inline"] == nil)  // too large: src only
        }
    }

    @Test("with previews too, a done that carries its tile inline carries no preview; one that does not carries its stored one")
    func inlineWithoutPreview() async throws {
        try await withOriginAndDaemon({ $0.batches.maxInlineBytes = 4096 }) { origin, daemon in
            try await origin.put("i2.jpg", Self.thumbnailer.testImage(width: 900, height: 600).array)
            let url = origin.url("/file/i2.jpg")
            let body = "{\"items\":[{\"url\":\"\(url)\"},{\"url\":\"\(url)\",\"w\":600,\"h\":400}],\"w\":64,\"h\":64,\"format\":\"jpeg\",\"inline\":true,\"preview\":true}"
            _ = try await Self.batchEvents(daemon, body)  // cold: both tiles and their previews made and stored
            // Warm, once both tiles are hits and the large one's done has its stored preview
            // (the store commits after the cold batch's done): at most 10 s.
            func ready(_ events: [EventStreamParser.Event]) -> Bool {
                let done = events.filter { $0.type == "done" }.map(payload)
                return done.count == 2 && done.allSatisfy { $0["cache"] as? String == "hit" }
                    && done.contains { $0["index"] as? Int == 1 && $0["preview"] is String }
            }
            var warm = try await Self.batchEvents(daemon, body)
            for _ in 0..<50 where !ready(warm) {
                try await Task.sleep(for: .milliseconds(200))
                warm = try await Self.batchEvents(daemon, body)
            }
            #expect(ready(warm))
            let done = warm.filter { $0.type == "done" }.map(payload)
            let small = try #require(done.first { $0["index"] as? Int == 0 })
            #expect(small["inline"] is String && small["preview"] == nil)
            #expect(!warm.contains { $0.type == "preview" })
        }
    }

    @Test("previews never delay a tile: a tile cached without one is done at once, its preview follows, and is stored")
    func previewAfterDone() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("c1.jpg", Self.thumbnailer.testImage(width: 900, height: 600).array)
            // The variant is made by a plain /thumb request: no preview with it.
            #expect(try await request(daemon.port, origin.thumb("/file/c1.jpg", "&w=100&h=100")).status == 200)
            let body = "{\"urls\":[\"\(origin.url("/file/c1.jpg"))\"],\"w\":100,\"h\":100,\"preview\":true}"
            let first = try await Self.batchEvents(daemon, body)
            let types = first.map(\.type)
            let made = try Self.previews(first)
            #expect(made[0].map { $0.event && !$0.beforeDone } == true, "\(types)")  // done first, then the preview
            // Stored (the store commits it after the event: the original, the tile, the preview):
            // a later batch has it in done.
            #expect(try await eventually(10) { daemon.thumbd.store.statistics().objects == 3 })
            let again = try Self.previews(try await Self.batchEvents(daemon, body))
            #expect(again[0].map { !$0.event && $0.uri == made[0]?.uri } == true)
            // Originals (no w/h) get theirs the same way: after done, from the image itself.
            let originals = try await Self.batchEvents(daemon, "{\"urls\":[\"\(origin.url("/file/c1.jpg"))\"],\"preview\":true}")
            #expect(try Self.previews(originals)[0].map { $0.event && !$0.beforeDone } == true, "\(originals.map(\.type))")
            // Purging the URL takes its previews with it.
            #expect(try await request(daemon.port, "/cache?url=\(origin.url("/file/c1.jpg").queryEncoded)", method: "DELETE").status == 200)
            let purged = try Self.previews(try await Self.batchEvents(daemon, body))
            #expect(purged[0].map { $0.event } == true)
        }
    }

    @Test("per item: an item's own parameters win over the batch's; a bad one fails that item only")
    func perItem() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("p.jpg", Self.thumbnailer.testImage(width: 800, height: 600).array)
            let url = origin.url("/file/p.jpg")
            let body = """
                {"items":[{"url":"\(url)","id":"batch"},{"url":"\(url)","id":"own","w":50,"format":"png"},\
                {"url":"\(url)","id":"bad","w":"wide"},{"url":"\(url)","id":"typo","width":50}],"w":100,"h":100}
                """
            let created = try await request(daemon.port, "/batches", method: "POST", headers: json, body: body)
            #expect(created.status == 201)
            let events = try #require(created.json["events"] as? String)
            let client = try await blocking { try EventStreamClient(port: daemon.port, path: events) }
            try await blocking { try client.read(seconds: 20) }
            var outcomes: [String: [String: Any]] = [:]
            for event in client.parser.events where event.type == "done" || event.type == "failed" {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
                outcomes[object["id"] as? String ?? ""] = object
            }
            #expect(outcomes["bad"]?["status"] as? Int == 400)
            #expect(outcomes["bad"]?["error"] as? String == "bad_parameter")
            #expect(outcomes["typo"]?["status"] as? Int == 400)
            #expect(outcomes["typo"]?["error"] as? String == "unknown_parameter")
            for (id, size, type) in [("batch", (100, 100), "image/jpeg"), ("own", (50, 100), "image/png")] {
                let src = try #require(outcomes[id]?["src"] as? String)
                let tile = try await request(daemon.port, src)
                #expect(tile[header: "X-Thumbd-Cache"] == "hit", "\(id)")
                #expect(tile[header: "Content-Type"] == type)
                #expect(try (Self.header(tile).width, Self.header(tile).height) == size, "\(id): \(src)")
            }
        }
    }

    struct StatsView: Decodable { var thumbnails: Int }

    /// A PNG header claiming 30000×30000 pixels (900 megapixels).
    static let bomb = Bytes(TestImages.pngHeaderOnly(width: 30_000, height: 30_000))
}
