import Foundation
import Support
import TestThreads
import Testing
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// Animated GIF and WebP sources through the real daemon: kept animated where the output can
/// animate, within `thumbnails.maxFrames` and the pixels of all frames; else the first frame.
@Suite("GET /thumb of animated GIF and WebP", .ownThreads)
struct AnimationTests {
    static let thumbnailer = try! Thumbnailer()

    static func header(_ result: HTTPResult) throws -> ImageHeader {
        try thumbnailer.header(of: Bytes(result.body))
    }

    /// Whether a WebP holds an animation (its `ANIM` chunk).
    static func animatedWebP(_ body: [UInt8]) -> Bool {
        body.count > 16 && Array(body[8..<12]) == Array("WEBP".utf8)
            && (0..<(body.count - 4)).contains { Array(body[$0..<($0 + 4)]) == Array("ANIM".utf8) }
    }

    @Test("an animated GIF stays a GIF of every frame; as WebP it has an ANIM chunk; PNG or JPEG is its first frame")
    func gif() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("a.gif", Self.thumbnailer.animation(width: 64, height: 48, frames: 6, format: .gif).array)
            let kept = try await request(daemon.port, origin.thumb("/file/a.gif", "&w=32"))
            #expect(kept.status == 200 && kept[header: "Content-Type"] == "image/gif", "\(kept.text.prefix(200))")
            let gif = try Self.header(kept)
            #expect((gif.width, gif.height, gif.pages) == (32, 24, 6))
            let webp = try await request(daemon.port, origin.thumb("/file/a.gif", "&w=32&format=webp"))
            #expect(webp[header: "Content-Type"] == "image/webp" && Self.animatedWebP(webp.body))
            #expect(try Self.header(webp).pages == 6 && Self.header(webp).height == 24)
            let covered = try await request(daemon.port, origin.thumb("/file/a.gif", "&w=16&h=16&format=webp&rotate=90"))
            #expect(try (Self.header(covered).width, Self.header(covered).height, Self.header(covered).pages) == (16, 16, 6))
            for format in ["png", "jpeg"] {
                let still = try await request(daemon.port, origin.thumb("/file/a.gif", "&w=32&format=\(format)"))
                #expect(try (Self.header(still).width, Self.header(still).height, Self.header(still).pages) == (32, 24, 1), "\(format)")
            }
            // The frames keep their order: the first is black, the last light grey.
            let first = try Self.thumbnailer.pixel(of: Bytes(kept.body), x: 5, y: 5)
            #expect(first.prefix(3).allSatisfy { $0 < 30 }, "\(first)")
        }
    }

    @Test("an animated WebP stays animated as WebP")
    func webp() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("a.webp", Self.thumbnailer.animation(width: 60, height: 60, frames: 4, format: .webp).array)
            let kept = try await request(daemon.port, origin.thumb("/file/a.webp", "&w=30"))
            #expect(kept[header: "Content-Type"] == "image/webp" && Self.animatedWebP(kept.body), "\(kept.text.prefix(200))")
            #expect(try Self.header(kept).pages == 4 && Self.header(kept).width == 30)
        }
    }

    @Test("past maxFrames, or past maxSourcePixels over all frames, the thumbnail is the first frame: 5000 frames make one")
    func bounded() async throws {
        try await withOriginAndDaemon({ $0.thumbnails.maxSourcePixels = 1_000_000 }) { origin, daemon in
            try await origin.put("many.gif", Self.thumbnailer.animation(width: 8, height: 8, frames: 5000, format: .gif).array)
            let many = try await request(daemon.port, origin.thumb("/file/many.gif", "&w=8&format=webp"))
            #expect(many.status == 200 && !Self.animatedWebP(many.body), "\(many.text.prefix(200))")
            #expect(try Self.header(many).pages == 1)
            let gif = try await request(daemon.port, origin.thumb("/file/many.gif", "&w=8"))
            #expect(gif[header: "Content-Type"] == "image/png")  // a still GIF becomes PNG, as ever
            // 30 frames of 200×200: 1.2 million pixels in all, over this daemon's 1 million.
            try await origin.put("large.gif", Self.thumbnailer.animation(width: 200, height: 200, frames: 30, format: .gif).array)
            let large = try await request(daemon.port, origin.thumb("/file/large.gif", "&w=50&format=webp"))
            #expect(large.status == 200 && !Self.animatedWebP(large.body))
            try await origin.put("small.gif", Self.thumbnailer.animation(width: 100, height: 100, frames: 30, format: .gif).array)
            let small = try await request(daemon.port, origin.thumb("/file/small.gif", "&w=50&format=webp"))
            #expect(try Self.animatedWebP(small.body) && Self.header(small).pages == 30)
        }
        try await withOriginAndDaemon({ $0.thumbnails.maxFrames = 3 }) { origin, daemon in
            try await origin.put("a.gif", Self.thumbnailer.animation(width: 64, height: 48, frames: 6, format: .gif).array)
            let still = try await request(daemon.port, origin.thumb("/file/a.gif", "&w=32&format=webp"))
            #expect(try !Self.animatedWebP(still.body) && Self.header(still).pages == 1)
        }
    }
}
