import Foundation
import Testing
import Support
import Upstream
import Thumbnailer
@testable import ThumbdCore

@Suite("Freshness, sniffing, validators")
struct HTTPSemanticsTests {
    static let now = Date(timeIntervalSince1970: 1_700_000_000)  // Tue, 14 Nov 2023 22:13:20 GMT

    @Test("HTTP dates: IMF-fixdate parsed to the second; anything else is not a date")
    func httpDates() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT")?.timeIntervalSince1970 == 784_111_777)
        #expect(HTTPDate.parse("Thu, 01 Jan 1970 00:00:00 GMT")?.timeIntervalSince1970 == 0)
        #expect(HTTPDate.parse("Tue, 29 Feb 2000 12:00:00 GMT")?.timeIntervalSince1970 == 951_825_600)
        #expect(HTTPDate.parse(" Fri, 31 Dec 2038 23:59:59 GMT ")?.timeIntervalSince1970 == 2_177_452_799)
        for bad in ["", "0", "-1", "Sun, 06 Nov 1994 08:49:37 UTC", "Sunday, 06-Nov-94 08:49:37 GMT",
                    "Sun Nov  6 08:49:37 1994", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 25:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT"] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
    }

    @Test("a hit's Cache-Control states its remaining seconds in decimal")
    func maxAge() {
        #expect(ThumbHandler.publicMaxAge(0) == "public, max-age=0")
        #expect(ThumbHandler.publicMaxAge(9) == "public, max-age=9")
        #expect(ThumbHandler.publicMaxAge(10) == "public, max-age=10")
        #expect(ThumbHandler.publicMaxAge(86_400) == "public, max-age=86400")
        #expect(ThumbHandler.publicMaxAge(Int64.max) == "public, max-age=\(Int64.max)")
        #expect(ThumbHandler.publicMaxAge(-5) == "public, max-age=0")
    }

    @Test("Cache-Control and Expires decide freshness")
    func freshness() {
        func of(_ cc: String?, expires: String? = nil, date: String? = nil) -> Freshness {
            Freshness.of(cacheControl: cc, expires: expires, date: date, now: Self.now, defaultTTL: 3600, maxTTL: 86_400)
        }
        #expect(of(nil) == Freshness(storable: true, ttlSeconds: 3600))
        #expect(of("max-age=60") == Freshness(storable: true, ttlSeconds: 60))
        #expect(of("public, max-age=60, s-maxage=30") == Freshness(storable: true, ttlSeconds: 30))
        #expect(of("max-age=99999999") == Freshness(storable: true, ttlSeconds: 86_400))
        #expect(of("no-store") == Freshness(storable: false, ttlSeconds: 0))
        #expect(of("private, max-age=60") == Freshness(storable: false, ttlSeconds: 0))
        #expect(of("no-cache") == Freshness(storable: true, ttlSeconds: 0, graceSeconds: Freshness.mustRevalidate))
        // Once stale: the origin's stale-while-revalidate, or never (must-revalidate).
        #expect(of("max-age=60, stale-while-revalidate=30") == Freshness(storable: true, ttlSeconds: 60, graceSeconds: 30))
        #expect(of("max-age=60, must-revalidate") == Freshness(storable: true, ttlSeconds: 60, graceSeconds: -1))
        #expect(of("max-age=60, proxy-revalidate, stale-while-revalidate=30").graceSeconds == -1)
        #expect(Freshness.grace(of: 0, configured: 10) == 10)
        #expect(Freshness.grace(of: 30, configured: 10) == 30)
        #expect(Freshness.grace(of: Freshness.mustRevalidate, configured: 10) == 0)
        #expect(of(nil, expires: "Tue, 14 Nov 2023 23:13:20 GMT") == Freshness(storable: true, ttlSeconds: 3600))
        #expect(of(nil, expires: "Tue, 14 Nov 2023 23:13:20 GMT", date: "Tue, 14 Nov 2023 23:03:20 GMT")
                == Freshness(storable: true, ttlSeconds: 600))
        #expect(of(nil, expires: "0") == Freshness(storable: true, ttlSeconds: 0))
        #expect(of("max-age=10", expires: "Tue, 14 Nov 2023 23:13:20 GMT") == Freshness(storable: true, ttlSeconds: 10))
    }

    @Test("images are recognized by their bytes")
    func sniffing() {
        func type(_ bytes: [UInt8]) -> String? { ImageSniffer.contentType(of: bytes + [UInt8](repeating: 0, count: 32)) }
        #expect(type([0xFF, 0xD8, 0xFF, 0xE0]) == "image/jpeg")
        #expect(type([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) == "image/png")
        #expect(type(Array("GIF89a".utf8)) == "image/gif")
        #expect(type(Array("RIFF".utf8) + [1, 2, 3, 4] + Array("WEBP".utf8)) == "image/webp")
        #expect(type([0, 0, 0, 0x1C] + Array("ftypavif".utf8)) == "image/avif")
        #expect(type(Array("<html>".utf8)) == nil)
        #expect(type(Array("<svg xmlns=".utf8)) == nil)
        #expect(type([0, 0, 0, 0x1C] + Array("ftypheic".utf8)) == "image/heic")
        #expect(type(Array("II*\0".utf8)) == "image/tiff")
        // Refused: no decoder of thumbd's reads them.
        #expect(type(Array("BM".utf8) + [UInt8](repeating: 0x20, count: 40)) == nil)  // BMP (and `BM…<svg`)
        #expect(type([0, 0, 1, 0, 1, 0]) == nil)  // ICO
        #expect(type([0xFF, 0x0A]) == nil)  // JPEG XL
        #expect(type([0, 0, 0, 0x1C] + Array("ftypisom".utf8)) == nil)  // an MP4, not an image
        #expect(ImageSniffer.contentType(of: []) == nil)
        #expect(ImageSniffer.contentType(of: [0xFF, 0xD8]) == nil)
    }

    @Test("If-None-Match uses the weak comparison and understands lists and *")
    func etags() {
        #expect(ETagMatch.matches("\"abc\"", "\"abc\""))
        #expect(ETagMatch.matches("W/\"abc\"", "\"abc\""))
        #expect(ETagMatch.matches("\"x\", \"abc\"", "\"abc\""))
        #expect(ETagMatch.matches("*", "\"abc\""))
        #expect(!ETagMatch.matches("\"abd\"", "\"abc\""))
        #expect(ObjectSource.etag(of: Bytes([1, 2, 3])) == ObjectSource.etag(of: Bytes([1, 2, 3])))
        #expect(ObjectSource.etag(of: Bytes([1, 2, 3])) != ObjectSource.etag(of: Bytes([1, 2, 4])))
    }

    @Test("every error code has one status, a 4xx or 5xx, and a unique snake_case name")
    func errorTable() {
        for code in ErrorCode.allCases {
            #expect((400...599).contains(code.status), "\(code)")
            #expect(code.rawValue.allSatisfy { $0.isLowercase || $0 == "_" }, "\(code)")
        }
        #expect(Set(ErrorCode.allCases.map(\.rawValue)).count == ErrorCode.allCases.count)
        #expect(ThumbdError.upstreamStatus(410).status == 410)
        #expect(ThumbdError.upstreamStatus(404).code == .upstreamNotFound)
    }

    @Test("the README's error table lists every code a client can see")
    func readmeTable() throws {
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        for code in ErrorCode.allCases where ![.cancelled, .internalError, .listenFailed].contains(code) {
            #expect(readme.contains("`\(code.rawValue)`"), "\(code.rawValue) is not in the README")
        }
    }

    @Test("error bodies are the contract's JSON")
    func errorJSON() throws {
        let error = ThumbdError.badRequest(.badParameter, "a \"quoted\"\nline")
        let object = try JSONSerialization.jsonObject(with: Data(error.jsonBody.array)) as? [String: String]
        #expect(object == ["error": "bad_parameter", "message": "a \"quoted\"\nline"])
    }

    @Test("Accept's q-values are numbers; a refused or unlisted type is never chosen")
    func acceptQValues() {
        let offered: [ImageFormat] = [.jpeg, .webp, .avif]
        let cases: [(String?, ImageFormat?)] = [
            (nil, .jpeg), ("", .jpeg), ("*/*", .jpeg), ("image/*", .jpeg),
            ("image/avif;q=0.00,image/webp", .webp), ("image/avif;q=0.000", nil), ("image/avif; q=0.001", .avif),
            ("image/webp;q=0.5,image/avif;q=0.9", .avif), ("image/jpeg;q=0, */*", .webp),
            ("image/png", .png), ("image/png;q=0,image/gif", nil), ("text/html", nil),
            ("IMAGE/WEBP", .webp), ("image/webp;q=2", nil), ("image/webp;q=abc,image/png", .png),
        ]
        for (accept, expected) in cases {
            #expect(ThumbnailParameters.negotiate(accept: accept, offered: offered) == expected, "\(accept ?? "no Accept")")
        }
    }

    @Test("a misspelt name gets the nearest known one; another service's name gets ours")
    func parameterSuggestions() {
        let known = ParameterNames.thumb
        for (name, hint) in [("width", "w"), ("widht", "w"), ("fromat", "format"), ("Q", "q"), ("quality", "q"),
                             ("gravty", "gravity"), ("zzzz", nil)] as [(String, String?)] {
            #expect(ParameterNames.suggestion(for: name, among: known) == hint, "\(name)")
        }
        #expect(throws: ThumbdError.self) { try ParameterNames.check(["url", "zoom"], known: known) }
        #expect(throws: Never.self) { try ParameterNames.check(["url", "blur", "dpr", "preset", "crop"], known: known) }
        #expect(throws: Never.self) { try ParameterNames.check(["url", "w", "sig"], known: known) }
    }
}
