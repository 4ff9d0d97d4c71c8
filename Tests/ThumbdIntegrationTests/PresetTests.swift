import Foundation
import Support
import TestThreads
import Testing
import ThumbdTesting
import Thumbnailer
@testable import ThumbdCore

/// `preset=NAME` from `thumbnails.presets`, and `thumbnails.onlyPresets`.
@Suite("Presets", .ownThreads)
struct PresetTests {
    static let thumbnailer = try! Thumbnailer()
    static let presets = ["tile": ["w": "64", "h": "64", "fit": "cover", "format": "webp"], "wide": ["w": "120", "h": "40"]]

    static func size(_ result: HTTPResult) throws -> [Int] {
        let header = try thumbnailer.header(of: Bytes(result.body))
        return [header.width, header.height]
    }

    @Test("preset=NAME applies its parameters; the request's own win; an unknown name is 400 naming the known ones")
    func named() async throws {
        try await withOriginAndDaemon({ $0.thumbnails.presets = Self.presets }) { origin, daemon in
            try await origin.put("p.jpg", Self.thumbnailer.testImage(width: 400, height: 300).array)
            let tile = try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=tile"))
            #expect(try tile[header: "Content-Type"] == "image/webp" && Self.size(tile) == [64, 64], "\(tile.text.prefix(200))")
            let same = try await request(daemon.port, origin.thumb("/file/p.jpg", "&w=64&h=64&fit=cover&format=webp"))
            #expect(same[header: "X-Thumbd-Cache"] == "hit")  // one variant, however it was named
            let narrower = try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=tile&w=32"))
            #expect(try Self.size(narrower) == [32, 64])
            let unknown = try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=huge"))
            #expect(unknown.status == 400 && unknown.errorCode == "bad_parameter")
            #expect((unknown.json["message"] as? String)?.contains("tile, wide") == true, "\(unknown.text)")
            let batch = try await request(daemon.port, "/batches", method: "POST", headers: json,
                                          body: "{\"urls\":[\"\(origin.url("/file/p.jpg"))\"],\"preset\":\"wide\"}")
            #expect(batch.status == 201)
        }
    }

    @Test("onlyPresets refuses every other thumbnail parameter; presets and originals are served")
    func only() async throws {
        try await withOriginAndDaemon({ $0.thumbnails.presets = Self.presets; $0.thumbnails.onlyPresets = true }) { origin, daemon in
            try await origin.put("p.jpg", Self.thumbnailer.testImage(width: 400, height: 300).array)
            for extra in ["&w=64", "&preset=tile&w=32", "&blur=2", "&dpr=2&preset=tile"] {
                let refused = try await request(daemon.port, origin.thumb("/file/p.jpg", extra))
                #expect(refused.status == 400 && refused.errorCode == "bad_parameter", "\(extra)")
                #expect((refused.json["message"] as? String)?.contains("onlyPresets") == true)
            }
            #expect(try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=tile")).status == 200)
            let original = try await request(daemon.port, origin.thumb("/file/p.jpg"))
            #expect(try original.status == 200 && Self.size(original) == [400, 300])
            let batch = try await request(daemon.port, "/batches", method: "POST", headers: json,
                                          body: "{\"urls\":[\"\(origin.url("/file/p.jpg"))\"],\"w\":64}")
            #expect(batch.status == 400 && batch.errorCode == "bad_parameter")
        }
    }

    @Test("the signature covers the preset's name")
    func signed() async throws {
        let key = "0123456789abcdef-key-one"
        try await withOriginAndDaemon({ $0.thumbnails.presets = Self.presets; $0.signing.keys = [key] }) { origin, daemon in
            try await origin.put("p.jpg", Self.thumbnailer.testImage(width: 400, height: 300).array)
            let url = origin.url("/file/p.jpg")
            let sig = try #require(URLSigner(keys: [key]).signature { ["url": url, "preset": "tile"][$0] })
            #expect(try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=tile&sig=\(sig)")).status == 200)
            let swapped = try await request(daemon.port, origin.thumb("/file/p.jpg", "&preset=wide&sig=\(sig)"))
            #expect(swapped.status == 403 && swapped.errorCode == "bad_signature")
        }
    }

    @Test("thumbnails.presets loads from the file as a mapping and from THUMBD_THUMBNAILS_PRESETS as JSON; a bad one refuses the start")
    func settings() async throws {
        let loaded = try await ThumbdConfiguration.load(file: nil, environment: [
            "THUMBD_THUMBNAILS_PRESETS": #"{"avatar":{"w":128,"h":128,"fit":"cover","progressive":true,"blur":1.5}}"#,
            "THUMBD_THUMBNAILS_ONLY_PRESETS": "true",
        ])
        #expect(loaded.thumbnails.presets == ["avatar": ["w": "128", "h": "128", "fit": "cover", "progressive": "1", "blur": "1.5"]])
        #expect(loaded.thumbnails.onlyPresets)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-presets-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("thumbd.yaml")
        try """
            thumbnails:
              presets:
                tile: {w: 64, h: 64, gravity: attention}
                strip:
                  w: 300
                  crop: "0,0,600,200"
            """.write(to: file, atomically: true, encoding: .utf8)
        let fromFile = try await ThumbdConfiguration.load(file: file.path, environment: [:])
        #expect(fromFile.thumbnails.presets == ["tile": ["w": "64", "h": "64", "gravity": "attention"],
                                                "strip": ["w": "300", "crop": "0,0,600,200"]])
        // The environment wins over the file.
        let both = try await ThumbdConfiguration.load(file: file.path, environment: ["THUMBD_THUMBNAILS_PRESETS": #"{"x":{"w":1}}"#])
        #expect(Array(both.thumbnails.presets.keys) == ["x"])
        for bad in [#"{"a":{"w":0}}"#, #"{"a":{"width":10}}"#, #"{"a b":{"w":10}}"#, #"[1]"#, #"{"a":{}}"#, #"{"a":{"preset":"b"}}"#] {
            await #expect(throws: ConfigurationError.self, "\(bad)") {
                _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_PRESETS": bad])
            }
        }
        await #expect(throws: ConfigurationError.self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_ONLY_PRESETS": "true"])
        }
        // The page's preset: named, or under onlyPresets the first by name; one not listed refuses the start.
        let two = #"{"b":{"w":90},"a":{"w":120}}"#
        #expect(try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_PRESETS": two]).thumbnails.pageAsks == nil)
        #expect(try await ThumbdConfiguration.load(file: nil, environment: [
            "THUMBD_THUMBNAILS_PRESETS": two, "THUMBD_THUMBNAILS_ONLY_PRESETS": "true"]).thumbnails.pageAsks == "a")
        #expect(try await ThumbdConfiguration.load(file: nil, environment: [
            "THUMBD_THUMBNAILS_PRESETS": two, "THUMBD_THUMBNAILS_PAGE_PRESET": "b"]).thumbnails.pageAsks == "b")
        await #expect(throws: ConfigurationError.self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_PRESETS": two, "THUMBD_THUMBNAILS_PAGE_PRESET": "c"])
        }
    }
}
