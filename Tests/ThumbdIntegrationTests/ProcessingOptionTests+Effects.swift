import Foundation
import Support
import Testing
import LoopbackClient
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// The options that change pixels or bytes rather than the geometry (bg, blur, sharpen,
/// progressive), and every option through a batch.
extension ProcessingOptionTests {
    @Test("bg pads contain and flattens for JPEG; without it the pad is white for JPEG, transparent for PNG")
    func background() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            let green = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&h=100&fit=contain&format=jpeg&bg=00ff00"))
            #expect(try Self.size(green) == [100, 100])
            #expect(try Self.colour(green, 50, 5) == .green && Self.colour(green, 50, 95) == .green)
            #expect(try Self.colour(green, 10, 30) == .red)  // the image itself, in the middle band
            let white = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&h=100&fit=contain&format=jpeg"))
            #expect(try Self.colour(white, 50, 5) == .white)
            let clear = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&h=100&fit=contain&format=png"))
            #expect(try Self.thumbnailer.pixel(of: Bytes(clear.body), x: 50, y: 5).last == 0)  // alpha 0
            let opaque = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&h=100&fit=contain&format=png&bg=0000ff"))
            let pad = try Self.thumbnailer.pixel(of: Bytes(opaque.body), x: 50, y: 5)
            #expect(Colour(pad) == .blue && (pad.count == 3 || pad.last == 255), "\(pad)")
            // A transparent source flattened on bg for JPEG: the transparent pad of a PNG thumbnail.
            try await origin.put("clear.png", clear.body)
            let flattened = try await request(daemon.port, origin.thumb("/file/clear.png", "&format=jpeg&bg=0000ff"))
            #expect(try Self.colour(flattened, 50, 5) == .blue)
            for extra in ["&bg=fff", "&bg=red", "&bg=gg0000", "&bg=1234567"] {
                let bad = try await request(daemon.port, origin.thumb("/file/q.png", "&w=10\(extra)"))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
            }
        }
    }

    @Test("blur mixes the quarters at their edge, sharpen keeps the size; the range is checked, the largest blur on a large output is refused before any work")
    func filters() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 400).array)
            let sharp = try await request(daemon.port, origin.thumb("/file/q.png", "&w=200&format=png"))
            let blurred = try await request(daemon.port, origin.thumb("/file/q.png", "&w=200&format=png&blur=8"))
            #expect(try Self.size(blurred) == [200, 200])
            let edge = try Self.thumbnailer.pixel(of: Bytes(blurred.body), x: 100, y: 50)
            #expect((60...200).contains(edge[0]) && (60...200).contains(edge[1]), "a mix of red and green: \(edge)")
            #expect(try Self.colour(sharp, 60, 50) == .red && Self.colour(sharp, 140, 50) == .green)
            #expect(try Self.colour(blurred, 20, 20) == .red)  // far from the edge
            let sharpened = try await request(daemon.port, origin.thumb("/file/q.png", "&w=200&format=png&sharpen=1.5"))
            #expect(try sharpened.status == 200 && Self.size(sharpened) == [200, 200], "\(sharpened.text.prefix(200))")
            #expect(try Self.colour(sharpened, 20, 20) == .red)
            let largest = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&blur=100"))
            #expect(largest.status == 200)
            let costly = try await request(daemon.port, origin.thumb("/file/q.png", "&w=4000&h=4000&fit=fill&blur=100"))
            #expect(costly.status == 422 && costly.errorCode == "resize_too_costly", "\(costly.text)")
            for extra in ["&blur=0.1", "&blur=101", "&blur=x", "&sharpen=0", "&sharpen=1e9", "&blur=nan"] {
                let bad = try await request(daemon.port, origin.thumb("/file/q.png", "&w=10\(extra)"))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
                #expect((bad.json["message"] as? String)?.contains("0.3 to 100") == true, "\(bad.text)")
            }
        }
    }

    @Test("progressive=1 makes a progressive JPEG (SOF2) and an interlaced PNG; without it, baseline")
    func progressive() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("p.jpg", Self.thumbnailer.testImage(width: 600, height: 400).array)
            func markers(_ body: [UInt8]) -> Set<UInt8> {
                Set((0..<(body.count - 1)).filter { body[$0] == 0xFF && (0xC0...0xC2).contains(body[$0 + 1]) }.map { body[$0 + 1] })
            }
            let progressive = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=200&progressive=1"))
            #expect(progressive[header: "Content-Type"] == "image/jpeg")
            #expect(markers(progressive.body).contains(0xC2) && !markers(progressive.body).contains(0xC0))
            let baseline = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=200"))
            #expect(markers(baseline.body).contains(0xC0) && !markers(baseline.body).contains(0xC2))
            let png = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=200&format=png&progressive=1"))
            #expect(png.body.count > 29 && png.body[28] == 1, "IHDR's interlace method is Adam7")
            let flat = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=200&format=png"))
            #expect(flat.body[28] == 0)
            let bad = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=200&progressive=yes"))
            #expect(bad.status == 400 && bad.errorCode == "bad_parameter")
        }
    }

    @Test("every option works batch-wide and per item, in the item's src")
    func batches() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            let url = origin.url("/file/q.png")
            let body = """
                {"items":[{"url":"\(url)","id":"batch"},{"url":"\(url)","id":"own","rotate":90,"crop":"0,0,200,100","progressive":true}],\
                "w":50,"dpr":2,"format":"png","blur":0.5}
                """
            let created = try await request(daemon.port, "/batches", method: "POST", headers: json, body: body)
            #expect(created.status == 201, "\(created.text)")
            let events = try #require(created.json["events"] as? String)
            let client = try await blocking { try EventStreamClient(port: daemon.port, path: events) }
            try await blocking { try client.read(seconds: 20) }
            var done: [String: String] = [:]
            for event in client.parser.events where event.type == "done" {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(event.data.utf8)) as? [String: Any])
                done[object["id"] as? String ?? ""] = object["src"] as? String
            }
            let batchSrc = try #require(done["batch"])
            #expect(batchSrc.contains("&dpr=2") && batchSrc.contains("&blur=0.5"), "\(batchSrc)")
            let tile = try await request(daemon.port, batchSrc)
            #expect(try tile[header: "X-Thumbd-Cache"] == "hit" && Self.size(tile) == [100, 50])
            let own = try await request(daemon.port, try #require(done["own"]))
            #expect(own[header: "X-Thumbd-Cache"] == "hit")
            #expect(try Self.size(own) == [100, 200])  // the red quarter, 200×100 → w 50×2, turned
            #expect(own.body[28] == 1)
        }
    }
}
