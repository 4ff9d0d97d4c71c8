import Foundation
import Support
import TestThreads
import Testing
import LoopbackClient
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// The processing options imgproxy and thumbor users reach for, through the real daemon, on
/// images the test draws: flat quarters (red top left, green top right, blue bottom left,
/// yellow bottom right, as stored), so that a pixel says which part of the source was kept.
@Suite("GET /thumb with dpr, gravity, focal, crop, bg, blur, sharpen, rotate, progressive", .ownThreads)
struct ProcessingOptionTests {
    static let thumbnailer = try! Thumbnailer()

    enum Colour: String, CustomStringConvertible {
        case red, green, blue, yellow, white, black
        var description: String { rawValue }

        /// The colour a pixel is, far from any other of these (JPEG's error is small).
        init?(_ bands: [Double]) {
            guard bands.count >= 3 else { return nil }
            let (r, g, b) = (bands[0] > 160, bands[1] > 160, bands[2] > 160)
            let (r0, g0, b0) = (bands[0] < 90, bands[1] < 90, bands[2] < 90)
            switch (r, g, b) {
            case (true, false, false) where g0 && b0: self = .red
            case (false, true, false) where r0 && b0: self = .green
            case (false, false, true) where r0 && g0: self = .blue
            case (true, true, false) where b0: self = .yellow
            case (true, true, true): self = .white
            case (false, false, false) where r0 && g0 && b0: self = .black
            default: return nil
            }
        }
    }

    static func colour(_ result: HTTPResult, _ x: Int, _ y: Int) throws -> Colour? {
        Colour(try thumbnailer.pixel(of: Bytes(result.body), x: x, y: y))
    }

    static func size(_ result: HTTPResult) throws -> [Int] {
        let header = try thumbnailer.header(of: Bytes(result.body))
        return [header.width, header.height]
    }

    @Test("dpr multiplies w and h, and shares the variant of the same size; out of range is 400 with the range")
    func dpr() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            let doubled = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&h=50&dpr=2"))
            #expect(try doubled.status == 200 && Self.size(doubled) == [200, 100], "\(doubled.text.prefix(200))")
            let same = try await request(daemon.port, origin.thumb("/file/q.png", "&w=200&h=100"))
            #expect(same[header: "X-Thumbd-Cache"] == "hit" && same.body == doubled.body)
            let half = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&dpr=1.5"))
            #expect(try Self.size(half) == [150, 75])
            for extra in ["&w=100&dpr=0.5", "&w=100&dpr=5", "&w=100&dpr=two", "&w=5000&dpr=2"] {
                let bad = try await request(daemon.port, origin.thumb("/file/q.png", extra))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
                if extra.hasSuffix("=5") { #expect((bad.json["message"] as? String)?.contains("from 1 to 4") == true) }
            }
        }
    }

    @Test("gravity keeps the named side of a cover crop; focal centres on its point, as near as the edges allow")
    func gravity() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("wide.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            try await origin.put("tall.png", Self.thumbnailer.quadrants(width: 200, height: 400).array)
            // Each: source, parameters, the colour at the tile's top left quarter and top right quarter.
            let cases: [(String, String, Colour, Colour)] = [
                ("wide.png", "", .red, .green),  // centre: the middle square straddles both halves
                ("wide.png", "&gravity=w", .red, .red),
                ("wide.png", "&gravity=e", .green, .green),
                ("wide.png", "&gravity=nw", .red, .red),
                ("wide.png", "&gravity=se", .green, .green),
                ("tall.png", "&gravity=n", .red, .green),
                ("tall.png", "&gravity=s", .blue, .yellow),
                ("wide.png", "&gravity=focal&fx=0.9&fy=0.5", .green, .green),
                ("wide.png", "&gravity=focal&fx=0.1&fy=0.5", .red, .red),
                ("wide.png", "&gravity=focal&fx=0.5&fy=0.5", .red, .green),
                ("tall.png", "&gravity=focal&fx=0.5&fy=1", .blue, .yellow),
            ]
            for (name, extra, left, right) in cases {
                let tile = try await request(daemon.port, origin.thumb("/file/\(name)", "&w=100&h=100&format=png\(extra)"))
                #expect(tile.status == 200, "\(name)\(extra): \(tile.text.prefix(200))")
                #expect(try Self.size(tile) == [100, 100])
                #expect(try Self.colour(tile, 10, 10) == left, "\(name)\(extra) left")
                #expect(try Self.colour(tile, 90, 10) == right, "\(name)\(extra) right")
            }
            for extra in ["&gravity=focal", "&gravity=focal&fx=0.5", "&fx=0.5&fy=0.5", "&gravity=n&fx=0.2&fy=0.2",
                          "&gravity=focal&fx=1.5&fy=0.5", "&gravity=middle"] {
                let bad = try await request(daemon.port, origin.thumb("/file/wide.png", "&w=100&h=100\(extra)"))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
            }
        }
    }

    @Test("crop and gravity are measured in the upright image: every EXIF orientation", arguments: 1...8)
    func orientation(_ orientation: Int) async throws {
        // The stored quarters seen upright: what the top left quarter of the upright image is.
        let upright: [Int: (topLeft: Colour, topRight: Colour)] = [
            1: (.red, .green), 2: (.green, .red), 3: (.yellow, .blue), 4: (.blue, .yellow),
            5: (.red, .blue), 6: (.blue, .red), 7: (.yellow, .green), 8: (.green, .yellow),
        ]
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("o.jpg", Self.thumbnailer.quadrants(width: 400, height: 200, format: .jpeg,
                                                                     orientation: orientation).array)
            let swaps = orientation >= 5
            let (width, height) = swaps ? (200, 400) : (400, 200)
            let expected = try #require(upright[orientation])
            let quarter = try await request(daemon.port, origin.thumb("/file/o.jpg", "&crop=0,0,\(width / 2),\(height / 2)&format=png"))
            #expect(quarter.status == 200, "\(quarter.text.prefix(200))")
            #expect(try Self.size(quarter) == [width / 2, height / 2])
            #expect(try Self.colour(quarter, width / 4, height / 4) == expected.topLeft, "orientation \(orientation)")
            let right = try await request(daemon.port, origin.thumb("/file/o.jpg", "&crop=\(width / 2),0,\(width / 2),\(height / 2)&w=50&format=png"))
            #expect(try Self.colour(right, 25, 10) == expected.topRight, "orientation \(orientation)")
            // gravity=nw keeps the upright top left.
            let corner = try await request(daemon.port, origin.thumb("/file/o.jpg", "&w=64&h=64&gravity=nw&format=png"))
            #expect(try Self.colour(corner, 8, 8) == expected.topLeft, "orientation \(orientation) gravity=nw")
        }
    }

    @Test("crop cuts before the resize; partly outside it is clamped, wholly outside or malformed it is 400")
    func crop() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            let corner = try await request(daemon.port, origin.thumb("/file/q.png", "&crop=200,100,200,100"))
            #expect(try Self.size(corner) == [200, 100])
            #expect(try Self.colour(corner, 100, 50) == .yellow)
            let resized = try await request(daemon.port, origin.thumb("/file/q.png", "&crop=0,0,200,100&w=50"))
            #expect(try Self.size(resized) == [50, 25] && Self.colour(resized, 25, 12) == .red)
            let clamped = try await request(daemon.port, origin.thumb("/file/q.png", "&crop=300,0,1000,1000"))
            #expect(try Self.size(clamped) == [100, 200])
            let outside = try await request(daemon.port, origin.thumb("/file/q.png", "&crop=5000,5000,10,10"))
            #expect(outside.status == 400 && outside.errorCode == "bad_parameter", "\(outside.text)")
            #expect((outside.json["message"] as? String)?.contains("outside the 400×200 image") == true)
            for extra in ["&crop=1,2,3", "&crop=0,0,0,10", "&crop=-1,0,10,10", "&crop=a,b,c,d", "&crop=0,0,99999999,10"] {
                let bad = try await request(daemon.port, origin.thumb("/file/q.png", extra))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
            }
        }
    }

    @Test("rotate turns after the EXIF orientation; w and h are the turned output's")
    func rotate() async throws {
        try await withOriginAndDaemon { origin, daemon in
            try await origin.put("q.png", Self.thumbnailer.quadrants(width: 400, height: 200).array)
            let cases: [(Int, [Int], Colour)] = [(90, [100, 200], .blue), (180, [100, 50], .yellow), (270, [100, 200], .green)]
            for (angle, size, topLeft) in cases {
                let turned = try await request(daemon.port, origin.thumb("/file/q.png", "&w=100&rotate=\(angle)"))
                #expect(try Self.size(turned) == size, "rotate=\(angle)")
                #expect(try Self.colour(turned, 10, 10) == topLeft, "rotate=\(angle)")
            }
            let box = try await request(daemon.port, origin.thumb("/file/q.png", "&w=60&h=120&rotate=90"))
            #expect(try Self.size(box) == [60, 120])
            try await origin.put("six.jpg", Self.thumbnailer.quadrants(width: 400, height: 200, format: .jpeg, orientation: 6).array)
            // Upright it is 200×400 with blue at its top left; a further quarter turn: 400×200, yellow there.
            let both = try await request(daemon.port, origin.thumb("/file/six.jpg", "&w=200&rotate=90&format=png"))
            #expect(try Self.size(both) == [200, 100])
            #expect(try Self.colour(both, 10, 10) == .yellow)
            for extra in ["&rotate=45", "&rotate=-90", "&rotate=360"] {
                let bad = try await request(daemon.port, origin.thumb("/file/q.png", "&w=10\(extra)"))
                #expect(bad.status == 400 && bad.errorCode == "bad_parameter", "\(extra)")
            }
        }
    }
}
