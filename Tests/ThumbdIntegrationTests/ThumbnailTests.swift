import Foundation
import Support
import TestThreads
import Testing
import LoopbackClient
import EventStream
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// Thumbnails through the real daemon, from images the test draws with libvips and serves
/// from the real origin.
@Suite("GET /thumb with w, h, fit, format", .ownThreads)
struct ThumbnailTests {
    static let thumbnailer = try! Thumbnailer()

    static func header(_ result: HTTPResult) throws -> ImageHeader {
        try thumbnailer.header(of: Bytes(result.body))
    }

    @Test("sizes and formats through the daemon; Content-Type from what was encoded; the original fetched once")
    func variants() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("photo.jpg", Self.thumbnailer.testImage(width: 1200, height: 800).array)
            let cases: [(String, Int, Int, String)] = [
                ("&w=256&h=256&fit=cover", 256, 256, "image/jpeg"),
                ("&w=256&h=256&fit=contain&format=png", 256, 256, "image/png"),
                ("&w=256&h=128&fit=fill&format=webp", 256, 128, "image/webp"),
                ("&w=256&h=256&fit=inside", 256, 171, "image/jpeg"),
                ("&w=300", 300, 200, "image/jpeg"),
                ("&h=100&q=50", 150, 100, "image/jpeg"),
            ]
            for (extra, width, height, type) in cases {
                let result = try await request(daemon.port, origin.thumb("/file/photo.jpg", extra))
                #expect(result.status == 200, "\(extra): \(result.text.prefix(200))")
                #expect(result[header: "Content-Type"] == type, "\(extra)")
                let header = try Self.header(result)
                #expect((header.width, header.height) == (width, height), "\(extra)")
                #expect(result[header: "X-Thumbd-Cache"] == "miss")
                let again = try await request(daemon.port, origin.thumb("/file/photo.jpg", extra))
                #expect(again[header: "X-Thumbd-Cache"] == "hit")
                #expect(again.body == result.body && again[header: "ETag"] == result[header: "ETag"])
            }
            #expect(try await origin.requests("/file/photo.jpg") == 1)  // every variant from the one original
        }
    }

    @Test("format=auto answers the format Accept gives the highest q, ties to the first of thumbnails.autoFormats (JPEG first by default, PNG for alpha), with Vary: Accept; 406 when it takes none",
          arguments: [false, true])
    func negotiation(avifFirst: Bool) async throws {
        try await withOriginAndDaemon({ if avifFirst { $0.thumbnails.autoFormats = [.avif, .webp, .jpeg] } }) { origin, daemon in
            try await origin.put("opaque.jpg", Self.thumbnailer.testImage(width: 400, height: 300).array)
            try await origin.put("alpha.png", Self.thumbnailer.testImage(width: 400, height: 300, alpha: true, format: .png).array)
            let avif = Self.thumbnailer.canEncodeAVIF
            let cases: [(String, String, String?)] = avifFirst ? [
                ("opaque.jpg", "image/avif,image/webp,*/*", avif ? "image/avif" : "image/webp"),
                ("opaque.jpg", "image/webp,*/*", avif ? "image/avif" : "image/webp"),  // */* lists AVIF too
                ("opaque.jpg", "image/avif;q=0,image/webp", "image/webp"),
                ("opaque.jpg", "image/avif;q=0.00,image/webp;q=0.5", "image/webp"),  // q-values are numbers
                ("opaque.jpg", "image/png", "image/png"),  // none offered is listed: one it lists
            ] : [
                ("opaque.jpg", "image/avif,image/webp,*/*", "image/jpeg"),  // */* lists JPEG, the cheapest
                ("opaque.jpg", "image/avif,image/webp", "image/webp"),
                ("opaque.jpg", "image/avif", avif ? "image/avif" : nil),
                ("opaque.jpg", "*/*", "image/jpeg"),
                ("opaque.jpg", "image/webp,*/*;q=0.8", "image/webp"),  // a higher q wins over the order
                ("opaque.jpg", "image/jpeg;q=0,image/*", "image/webp"),  // refused by name, listed by a range
                ("opaque.jpg", "text/html", nil),  // nothing thumbd makes: 406
                ("alpha.png", "*/*", "image/png"),
                ("alpha.png", "image/webp", "image/webp"),
            ]
            for (name, accept, type) in cases {
                let result = try await request(daemon.port, origin.thumb("/file/\(name)", "&w=64&format=auto"), headers: ["Accept": accept])
                if let type {
                    #expect(result.status == 200)
                    #expect(result[header: "Content-Type"] == type, "\(name) with \(accept)")
                    #expect(result[header: "Vary"] == "Accept")
                } else {
                    #expect(result.status == 406 && result.errorCode == "not_acceptable", "\(name) with \(accept)")
                }
            }
            let fixed = try await request(daemon.port, origin.thumb("/file/opaque.jpg", "&w=64&format=webp"))
            #expect(fixed[header: "Vary"] == nil)
        }
    }

    @Test("100 concurrent requests for one missing variant: one origin fetch, one resize")
    func oneResize() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("shared.jpg", Self.thumbnailer.testImage(width: 2000, height: 1500).array)
            let target = origin.thumb("/file/shared.jpg?delay=300", "&w=128&h=128")
            // 100 connections read on one thread: 100 blocking tasks would starve the dispatch
            // pool the other suites share.
            let results = try await blocking { () -> [HTTPResult] in
                let connections = try (0..<100).map { _ in try RawConnection(port: daemon.port) }
                for connection in connections { try connection.send("GET", target) }
                return try connections.map { try $0.read() }
            }
            #expect(results.allSatisfy { $0.status == 200 }, "\(Set(results.map { "\($0.status) \($0.text.prefix(120))" }))")
            #expect(Set(results.map(\.body)).count == 1)
            #expect(try await origin.requests("/file/shared.jpg") == 1)
            let stats = try JSONDecoder().decode(StatsView.self, from: Data(try await request(daemon.port, "/stats").body))
            #expect(stats.thumbnails == 1)
            // A variant of a cached original never touches the network.
            let other = try await request(daemon.port, origin.thumb("/file/shared.jpg?delay=300", "&w=64"))
            #expect(other.status == 200)
            #expect(try await origin.requests("/file/shared.jpg") == 1)
        }
    }

    @Test("refusals: not an image (415), a pixel bomb (422), bad parameters (400)")
    func refusals() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let garbage = try await request(daemon.port, origin.thumb("/garbage.png"))
            #expect(garbage.status == 415 && garbage.errorCode == "not_an_image")
            let garbageResized = try await request(daemon.port, origin.thumb("/garbage.png", "&w=64"))
            #expect(garbageResized.status == 415)
            let photo = try Self.thumbnailer.testImage(width: 800, height: 600).array
            try await origin.put("cut.jpg", Array(photo.prefix(photo.count / 2)))
            // Decoded by libvips's loader at 1/8 (w=64), and by libjpeg itself at 3/8 (w=300).
            for width in [64, 300] {
                let truncated = try await request(daemon.port, origin.thumb("/file/cut.jpg", "&w=\(width)"))
                #expect(truncated.status == 415 && truncated.errorCode == "not_an_image", "\(width): \(truncated.text)")
            }
            try await origin.put("bomb.png", Self.bomb.array)
            let bomb = try await request(daemon.port, origin.thumb("/file/bomb.png", "&w=64"))
            #expect(bomb.status == 422 && bomb.errorCode == "image_too_large", "\(bomb.text)")
            for extra in ["&w=0", "&w=abc", "&h=99999", "&fit=stretch", "&format=gif", "&q=101", "&gravity=north"] {
                let bad = try await request(daemon.port, origin.thumb("/file/cut.jpg", extra))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
            }
            #expect(try await request(daemon.port, "/healthz").status == 200)
        }
    }

    /// Each item's preview (from a `preview` event or from `done`) and whether it came before `done`.
    static func previews(_ events: [EventStreamParser.Event]) throws -> [Int: (uri: String, event: Bool, beforeDone: Bool)] {
        var previews: [Int: (String, Bool, Bool)] = [:]
        var done = Set<Int>()
        for event in events {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
            guard let index = object["index"] as? Int else { continue }
            if event.type == "preview", let uri = object["preview"] as? String {
                #expect(previews[index] == nil, "two previews for item \(index)")
                previews[index] = (uri, true, !done.contains(index))
            }
            if event.type == "done" {
                done.insert(index)
                if let uri = object["preview"] as? String {
                    #expect(previews[index] == nil, "two previews for item \(index)")
                    previews[index] = (uri, false, false)
                }
            }
        }
        return previews
    }

    /// Runs a batch to its end and returns its events.
    static func batchEvents(_ daemon: TestDaemon, _ body: String) async throws -> [EventStreamParser.Event] {
        let created = try await request(daemon.port, "/batches", method: "POST", headers: json, body: body)
        #expect(created.status == 201, "\(created.text)")
        let events = try #require(created.json["events"] as? String)
        let client = try await blocking { try EventStreamClient(port: daemon.port, path: events) }
        try await blocking { try client.read(seconds: 20) }
        return client.parser.events
    }
}
