import Foundation
import Testing
import ThumbdTesting

/// Origins that are broken or malicious (`/hostile/…` in scripts/testorigin.py): each gets
/// its JSON error at once, nothing bad is stored, and the daemon stays healthy.
@Suite("Hostile origins")
struct HostileOriginTests {
    struct Case: Sendable, CustomStringConvertible {
        var path: String
        var status: Int
        var code: String?
        var description: String { path }
    }

    static let cases: [Case] = [
        Case(path: "/hostile/double-length", status: 502, code: "upstream_bad_framing"),
        Case(path: "/hostile/list-length", status: 502, code: "upstream_bad_framing"),
        Case(path: "/hostile/same-length", status: 200, code: nil),
        // Only the declared half counts, and it holds no image (its bytes are the padding).
        Case(path: "/hostile/short-length", status: 415, code: "not_an_image"),
        Case(path: "/hostile/bad-chunked", status: 502, code: "upstream_truncated"),
        Case(path: "/hostile/reset", status: 502, code: "upstream_truncated"),
        Case(path: "/hostile/empty", status: 502, code: "upstream_failed"),
        Case(path: "/hostile/garbage", status: 502, code: "upstream_bad_response"),
        Case(path: "/hostile/bad-status", status: 502, code: "upstream_bad_response"),
        Case(path: "/hostile/endless", status: 502, code: "upstream_too_large"),
        Case(path: "/hostile/drip", status: 504, code: "upstream_timeout"),
        Case(path: "/hostile/gzip-bomb", status: 502, code: "upstream_too_large"),  // decoded size counts
        Case(path: "/hostile/redirect-loop", status: 502, code: "too_many_redirects"),
        Case(path: "/hostile/many-headers?n=300", status: 200, code: nil),  // 300 KB of headers, all ignored
        Case(path: "/hostile/redirect-to?url=ftp%3A%2F%2F127.0.0.1%2Fa.jpg", status: 502, code: "bad_redirect"),
    ]

    @Test("each hostile origin gets its answer within seconds, and the daemon stays healthy", arguments: cases)
    func hostile(_ row: Case) async throws {
        try await withOriginAndDaemon({
            $0.upstream.lowSpeedSeconds = 2
            $0.upstream.maxObjectBytes = 4 << 20
        }) { origin, daemon in
            let (result, took) = try await timedRequest(daemon.port, origin.thumb(row.path))
            #expect(took < .seconds(20), "\(took)")
            #expect(result.status == row.status, "\(result.text)")
            if let code = row.code { #expect(result.errorCode == code) }
            if row.status == 200 {
                #expect(result.body[...] == (try await origin.direct(row.path)).prefix(result.body.count))
                #expect(result.body.count == Int(result[header: "content-length"] ?? "") ?? -1)
            } else {
                // Not cached: the next request asks the origin again.
                let path = String(row.path.split(separator: "?")[0])
                let once = try await origin.requests(path)
                let again = try await request(daemon.port, origin.thumb(row.path))
                #expect(again[header: "X-Thumbd-Cache"] != "hit")
                // short-length sends bytes past its Content-Length; a fetch that then reads
                // them on the kept connection is tried again on a new one, so every row,
                // that one included, asks the origin again and gets the same answer.
                #expect(try await origin.requests(path) == 2 * once, "\(again.status) \(again.text)")
                #expect(again.status == row.status, "\(again.text)")
            }
            #expect(try await request(daemon.port, "/healthz").status == 200)
        }
    }

    /// Bounded origin headers: an 8 KB Last-Modified was stored and every later hit lost its
    /// connection (libmicrohttpd could not build the header block).
    @Test("an oversized or invalid origin header is dropped: the object is served, hit after hit",
          arguments: ["name=Last-Modified&bytes=8000", "name=ETag&bytes=9000", "name=Cache-Control&bytes=8000",
                      "name=Last-Modified&value=yesterday", "name=Date&bytes=7000", "name=Expires&bytes=7000"])
    func oversizedHeader(_ query: String) async throws {
        try await withOriginAndDaemon { origin, daemon in
            let target = origin.thumb("/hostile/long-header?" + query)
            let first = try await request(daemon.port, target)
            #expect(first.status == 200)
            for _ in 0..<2 {
                let again = try await request(daemon.port, target)
                #expect(again.status == 200)
                #expect(again.body == first.body)
                #expect((again[header: "last-modified"] ?? "").utf8.count <= 64)
            }
        }
    }

    @Test("a trailer cannot change what the headers said: the object is cached")
    func trailerIgnored() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let first = try await request(daemon.port, origin.thumb("/hostile/trailer"))
            #expect(first.status == 200)
            let second = try await request(daemon.port, origin.thumb("/hostile/trailer"))
            #expect(second[header: "x-thumbd-cache"] == "hit")
            #expect(try await origin.requests("/hostile/trailer") == 1)
        }
    }

    @Test("a redirect to a loopback name is refused before connecting")
    func redirectHop() async throws {
        // Private networks are allowed here (the origin is on loopback too), so the second hop
        // is refused by the allow list — checked before its socket is opened, like addresses.
        let origin = try await TestOrigin()
        let listener = try Listener()
        let daemon = try TestDaemon { $0.upstream.allowHosts = ["127.0.0.1"] }
        defer { daemon.remove(); origin.stop() }
        let hop = "http://localhost:\(listener.port)/x.jpg".queryEncoded
        let result = try await request(daemon.port, origin.thumb("/hostile/redirect-to?url=" + hop))
        #expect(result.status == 403)
        #expect(result.errorCode == "host_not_allowed")
        #expect(listener.pendingConnections() == 0)
    }
}
