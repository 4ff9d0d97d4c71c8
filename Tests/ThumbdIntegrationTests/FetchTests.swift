import Foundation
import Support
import Testing
import Thumbnailer
import ThumbdTesting

@Suite("GET /thumb: miss, hit, validators, restart")
struct FetchTests {
    @Test("the first request fetches, the second is a hit, and the bytes are the origin's")
    func missThenHit() async throws {
        try await withOriginAndDaemon { origin, daemon in

            let first = try await request(daemon.port, origin.thumb("/img/cat.jpg"))
            #expect(first.status == 200)
            #expect(first[header: "X-Thumbd-Cache"] == "miss")
            #expect(first[header: "Content-Type"] == "image/jpeg")
            #expect(first[header: "Content-Length"] == "12288")
            #expect(first[header: "Cache-Control"]?.hasPrefix("public, max-age=") == true)
            let etag = try #require(first[header: "ETag"])
            #expect(etag.hasPrefix("\"") && etag.hasSuffix("\"") && !etag.hasPrefix("W/"))
            #expect(first.body == (try await origin.direct("/img/cat.jpg")))

            let second = try await request(daemon.port, origin.thumb("/img/cat.jpg"))
            #expect(second.status == 200)
            #expect(second[header: "X-Thumbd-Cache"] == "hit")
            #expect(second[header: "ETag"] == etag)
            #expect(second.body == first.body)
            #expect(try await origin.requests("/img/cat.jpg") == 1)
        }
    }

    @Test("HEAD answers the headers of GET without a body; If-None-Match gives 304")
    func headAndConditional() async throws {
        try await withOriginAndDaemon { origin, daemon in

            let head = try await request(daemon.port, origin.thumb("/img/h.jpg", "&priority=high"), method: "HEAD")
            #expect(head.status == 200)
            #expect(head[header: "Content-Length"] == "12288")
            #expect(head.body.isEmpty)
            let etag = try #require(head[header: "ETag"])

            let notModified = try await request(daemon.port, origin.thumb("/img/h.jpg"), headers: ["If-None-Match": etag])
            #expect(notModified.status == 304)
            #expect(notModified.body.isEmpty)
            #expect(notModified[header: "ETag"] == etag)
            let weakList = try await request(daemon.port, origin.thumb("/img/h.jpg"), headers: ["If-None-Match": "\"other\", W/\(etag)"])
            #expect(weakList.status == 304)
            let changed = try await request(daemon.port, origin.thumb("/img/h.jpg"), headers: ["If-None-Match": "\"other\""])
            #expect(changed.status == 200)
            #expect(changed.body.count == 12288)
            #expect(try await origin.requests("/img/h.jpg") == 1)
            // A 304 states the 200's length, or none: never 0 (RFC 9110 §8.6).
            #expect(notModified[header: "Content-Length"] == nil || notModified[header: "Content-Length"] == "12288")
        }
    }

    @Test("If-Modified-Since against the Last-Modified sent: 304 when not newer; If-None-Match wins when both are sent")
    func ifModifiedSince() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let first = try await request(daemon.port, origin.thumb("/validated/m.jpg"))
            let lastModified = try #require(first[header: "Last-Modified"])  // Mon, 02 Nov 2026 10:00:00 GMT
            for (since, status) in [(lastModified, 304), ("Tue, 03 Nov 2026 10:00:00 GMT", 304),
                                    ("Sun, 01 Nov 2026 10:00:00 GMT", 200), ("not a date", 200)] {
                let answer = try await request(daemon.port, origin.thumb("/validated/m.jpg"), headers: ["If-Modified-Since": since])
                #expect(answer.status == status, "If-Modified-Since: \(since)")
            }
            let both = try await request(daemon.port, origin.thumb("/validated/m.jpg"),
                                         headers: ["If-Modified-Since": lastModified, "If-None-Match": "\"other\""])
            #expect(both.status == 200)
        }
    }

    @Test("a restarted daemon serves from its SQLite file without asking the origin")
    func hitAfterRestart() async throws {
        let origin = try await TestOrigin()
        let first = try TestDaemon()
        defer { first.remove(); origin.stop() }
        let original = try await request(first.port, origin.thumb("/img/persist.jpg"))
        #expect(original[header: "X-Thumbd-Cache"] == "miss")
        first.stop()

        let second = try TestDaemon(directory: first.directory)
        defer { second.stop() }
        let again = try await request(second.port, origin.thumb("/img/persist.jpg"))
        #expect(again.status == 200)
        #expect(again[header: "X-Thumbd-Cache"] == "hit")
        #expect(again.body == original.body)
        #expect(again[header: "ETag"] == original[header: "ETag"])
        #expect(try await origin.requests("/img/persist.jpg") == 1)
    }

    @Test("the origin's max-age sets the freshness; no-store is served but not kept")
    func freshnessFromOrigin() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let short = try await request(daemon.port, origin.thumb("/img/short.jpg?cc=max-age%3D120"))
            let maxAge = short[header: "Cache-Control"].flatMap { Int($0.split(separator: "=").last ?? "") }
            #expect(maxAge != nil && maxAge! <= 120 && maxAge! >= 118)

            _ = try await request(daemon.port, origin.thumb("/img/nostore.jpg?cc=no-store"))
            let again = try await request(daemon.port, origin.thumb("/img/nostore.jpg?cc=no-store"))
            #expect(again.status == 200)
            #expect(again[header: "X-Thumbd-Cache"] == "miss")
            #expect(try await origin.requests("/img/nostore.jpg") == 2)
        }
    }

    @Test("an expired object is fetched again; if the origin then fails, the stale copy is served")
    func staleOnError() async throws {
        // Without grace: an expired copy is not answered before the origin was asked.
        try await withOriginAndDaemon({ $0.store.graceSeconds = 0 }) { origin, daemon in
            let fresh = try await request(daemon.port, origin.thumb("/img/old.jpg?cc=max-age%3D0"))
            #expect(fresh[header: "X-Thumbd-Cache"] == "miss")
            let refetched = try await request(daemon.port, origin.thumb("/img/old.jpg?cc=max-age%3D0"))
            #expect(refetched[header: "X-Thumbd-Cache"] == "miss")
            #expect(try await origin.requests("/img/old.jpg") == 2)
            origin.stop()  // the origin goes away: connection refused
            try await Task.sleep(for: .milliseconds(100))
            let stale = try await request(daemon.port, origin.thumb("/img/old.jpg?cc=max-age%3D0"))
            #expect(stale.status == 200)
            #expect(stale[header: "X-Thumbd-Cache"] == "stale")
            #expect(stale.body == fresh.body)
        }
    }

    @Test("404 from the origin is passed through and remembered briefly (negative caching)")
    func negativeCaching() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let first = try await request(daemon.port, origin.thumb("/status/404"))
            #expect(first.status == 404)
            #expect(first.errorCode == "upstream_not_found")
            let second = try await request(daemon.port, origin.thumb("/status/404"))
            #expect(second.status == 404)
            #expect(second[header: "X-Thumbd-Cache"] == "hit")
            #expect(try await origin.requests("/status/404") == 1)
            // As the README says: a remembered 404 may be cached at most for what is left of
            // store.negativeTTLSeconds (60 s; 0 on the fetch itself); other errors are no-store.
            #expect(first[header: "Cache-Control"] == "public, max-age=0")
            let left = second[header: "Cache-Control"].flatMap { $0.split(separator: "=").last }.flatMap { Int($0) }
            #expect(second[header: "Cache-Control"]?.hasPrefix("public, max-age=") == true && (0...60).contains(left ?? -1))
            let failed = try await request(daemon.port, origin.thumb("/status/503"))
            #expect(failed.status == 502 && failed[header: "Cache-Control"] == "no-store")
        }
    }

    @Test("fallback=placeholder keeps the error status but answers an image tile of the asked size: an SVG when Accept lists it, else a PNG")
    func placeholder() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let failed = try await request(daemon.port, origin.thumb("/status/500", "&fallback=placeholder"))
            #expect(failed.status == 502)
            #expect(failed[header: "Content-Type"] == "image/png")
            #expect(failed[header: "X-Thumbd-Error"] == "upstream_status")
            #expect(Array(failed.body.prefix(8)) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
            let badRequest = try await request(daemon.port, "/thumb?url=ftp%3A%2F%2Fx&fallback=placeholder")
            #expect(badRequest.status == 400)
            #expect(badRequest[header: "Content-Type"] == "image/png")
            // Of the asked size: w×h, or w alone as a square. An SVG (a few hundred bytes
            // whatever the size) when Accept lists it, as a browser's does.
            let browser = ["Accept": "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"]
            for (query, size) in [("&w=200&h=120", "width=\"200\" height=\"120\""), ("&w=90", "width=\"90\" height=\"90\""),
                                  ("&w=8192&h=8192", "width=\"8192\" height=\"8192\""),
                                  ("&w=50&h=30&dpr=2", "width=\"100\" height=\"60\"")] {
                let sized = try await request(daemon.port, origin.thumb("/status/500", query + "&fallback=placeholder"), headers: browser)
                #expect(sized.status == 502)
                #expect(sized[header: "Content-Type"] == "image/svg+xml")
                #expect(sized[header: "Content-Security-Policy"] == "default-src 'none'")
                #expect(sized[header: "Vary"] == "Accept")
                let svg = String(decoding: sized.body, as: UTF8.self)
                #expect(svg.hasPrefix("<svg ") && svg.contains(size) && !svg.contains("script") && sized.body.count < 1024, "\(svg)")
            }
            // Otherwise (an app's image decoder draws no SVG) a PNG of that size, small at any size.
            let thumbnailer = try Thumbnailer()
            let cases: [(String, [String: String], Int, Int, Int)] = [
                ("&w=200&h=120", [:], 200, 120, 300), ("&w=90", ["Accept": "image/*"], 90, 90, 300),
                ("&w=1&h=1", [:], 1, 1, 300), ("&w=2&h=9", [:], 2, 9, 300), ("&w=17&h=3", [:], 17, 3, 300),
                ("&w=300&h=200", ["Accept": "image/svg+xml;q=0,image/png"], 300, 200, 400),
                ("&w=8192&h=8192", [:], 8192, 8192, 100_000),
            ]
            for (query, headers, width, height, largest) in cases {
                let png = try await request(daemon.port, origin.thumb("/status/500", query + "&fallback=placeholder"), headers: headers)
                #expect(png.status == 502 && png[header: "Content-Type"] == "image/png", "\(query)")
                #expect(png[header: "Vary"] == "Accept")
                #expect(png.body.count <= largest, "\(query): \(png.body.count) bytes")
                let header = try thumbnailer.header(of: Bytes(png.body))
                #expect((header.width, header.height) == (width, height), "\(query)")
                let corner = try thumbnailer.pixel(of: Bytes(png.body), x: 0, y: height - 1)
                #expect(corner.prefix(3) == [204, 204, 204], "\(query): the border, \(corner)")
                if width > 2 && height > 2 {
                    let inside = try thumbnailer.pixel(of: Bytes(png.body), x: width / 2, y: height / 2)
                    #expect(inside.prefix(3) == [242, 242, 242], "\(query): the fill, \(inside)")
                    let right = try thumbnailer.pixel(of: Bytes(png.body), x: width - 1, y: height / 2)
                    #expect(right.prefix(3) == [204, 204, 204], "\(query): the right border, \(right)")
                }
            }
            // A size out of range is refused with the placeholder's own size (its range is read
            // before the size is scaled by dpr: Int.max used to trap the daemon).
            for query in ["&w=9223372036854775807", "&w=9223372036854775807&dpr=4", "&h=4611686018427387904&dpr=2",
                          "&w=8193", "&w=0", "&w=-5", "&w=8192&dpr=2"] {
                let refused = try await request(daemon.port, origin.thumb("/img/x.jpg", query + "&fallback=placeholder"))
                #expect(refused.status == 400, "\(query)")
                #expect(refused[header: "X-Thumbd-Error"] == "bad_parameter", "\(query)")
                #expect(refused[header: "Content-Type"] == "image/png", "\(query)")
            }
            let badFallback = try await request(daemon.port, origin.thumb("/img/x.jpg", "&fallback=kitten"))
            #expect(badFallback.status == 400)
            #expect(badFallback.errorCode == "bad_parameter")
        }
    }

    @Test("healthz answers 200")
    func healthz() async throws {
        let daemon = try TestDaemon()
        defer { daemon.remove() }
        let health = try await request(daemon.port, "/healthz")
        #expect(health.status == 200)
        #expect(health.text.contains("ok"))
    }
}
