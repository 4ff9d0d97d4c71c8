import Foundation
import Testing
import ThumbdTesting

@Suite("The contract's error table, produced by a real local origin")
struct ErrorTests {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var target: @Sendable (TestOrigin) -> String
        var method = "GET"
        var status: Int
        var code: String
        /// The transfer's whole budget: short only where the row is the timeout, so that a
        /// loaded machine cannot turn another row's slow origin into one.
        var timeoutMilliseconds = 10_000
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "missing url", target: { _ in "/thumb" }, status: 400, code: "missing_url"),
        Case(name: "not a URL", target: { _ in "/thumb?url=just%20words" }, status: 400, code: "malformed_url"),
        Case(name: "ftp", target: { _ in "/thumb?url=ftp%3A%2F%2Fexample.org%2Fa.jpg" }, status: 400, code: "unsupported_scheme"),
        Case(name: "credentials", target: { o in "/thumb?url=" + "http://u:p@127.0.0.1:\(o.port)/img/a.jpg".queryEncoded },
             status: 400, code: "credentials_in_url"),
        Case(name: "bad priority", target: { $0.thumb("/img/a.jpg", "&priority=urgent") }, status: 400, code: "bad_parameter"),
        Case(name: "bad width", target: { $0.thumb("/img/a.jpg", "&w=0") }, status: 400, code: "bad_parameter"),
        Case(name: "a misspelt parameter", target: { $0.thumb("/img/a.jpg", "&width=100") }, status: 400, code: "unknown_parameter"),
        Case(name: "a dpr out of range", target: { $0.thumb("/img/a.jpg", "&w=100&dpr=5") }, status: 400, code: "bad_parameter"),
        Case(name: "not an image behind a PNG signature", target: { $0.thumb("/garbage.png") }, status: 415, code: "not_an_image"),
        Case(name: "unknown route", target: { _ in "/nowhere" }, status: 404, code: "not_found"),
        Case(name: "POST", target: { $0.thumb("/img/a.jpg") }, method: "POST", status: 405, code: "method_not_allowed"),
        Case(name: "upstream 404", target: { $0.thumb("/status/404") }, status: 404, code: "upstream_not_found"),
        Case(name: "upstream 410", target: { $0.thumb("/status/410") }, status: 410, code: "upstream_gone"),
        Case(name: "not an image", target: { $0.thumb("/not-an-image") }, status: 415, code: "not_an_image"),
        Case(name: "upstream 500", target: { $0.thumb("/status/500") }, status: 502, code: "upstream_status"),
        Case(name: "upstream 403", target: { $0.thumb("/status/403") }, status: 502, code: "upstream_status"),
        Case(name: "truncated", target: { $0.thumb("/truncated") }, status: 502, code: "upstream_truncated"),
        Case(name: "too large, with length", target: { $0.thumb("/big?size=300000") }, status: 502, code: "upstream_too_large"),
        Case(name: "too large, chunked", target: { $0.thumb("/big-chunked?size=300000") }, status: 502, code: "upstream_too_large"),
        Case(name: "too many redirects", target: { $0.thumb("/redirect/4") }, status: 502, code: "too_many_redirects"),
        Case(name: "unreachable", target: { _ in "/thumb?url=" + "http://127.0.0.1:9/img/a.jpg".queryEncoded },
             status: 502, code: "upstream_unreachable"),
        Case(name: "timeout", target: { $0.thumb("/hang") }, status: 504, code: "upstream_timeout", timeoutMilliseconds: 700),
    ]

    @Test("each row answers its status and JSON code", arguments: cases)
    func row(_ row: Case) async throws {
        try await withOriginAndDaemon({
            $0.upstream.maxObjectBytes = 200_000
            $0.upstream.maxRedirects = 3
            $0.upstream.timeoutMilliseconds = row.timeoutMilliseconds
        }) { origin, daemon in
            let result = try await request(daemon.port, row.target(origin), method: row.method)
            #expect(result.status == row.status)
            #expect(result[header: "Content-Type"] == "application/json")
            #expect(result.errorCode == row.code)
            // The daemon is still up and serving.
            #expect(try await request(daemon.port, origin.thumb("/img/after.jpg")).status == 200)
        }
    }

    @Test("redirects within the limit are followed")
    func redirectsFollowed() async throws {
        try await withOriginAndDaemon({ $0.upstream.maxRedirects = 3 }) { origin, daemon in
            let result = try await request(daemon.port, origin.thumb("/redirect/3"))
            #expect(result.status == 200)
            #expect(try await origin.requests("/redirect/0") == 1)
        }
    }

    @Test("a full queue answers 503 at once")
    func queueFull() async throws {
        try await withOriginAndDaemon({
            $0.upstream.maxConcurrent = 1
            $0.upstream.maxQueued = 1
        }) { origin, daemon in
            let running = try RawConnection(port: daemon.port)
            try running.send("GET", origin.thumb("/gate/q1"))
            let queued = try RawConnection(port: daemon.port)
            try queued.send("GET", origin.thumb("/gate/q2"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 2 })
            let refused = try await request(daemon.port, origin.thumb("/gate/q3"))
            #expect(refused.status == 503)
            #expect(refused.errorCode == "queue_full")
            try await origin.release("q1")
            try await origin.release("q2")
            #expect(try await blocking { try running.read() }.status == 200)
            #expect(try await blocking { try queued.read() }.status == 200)
        }
    }
}

@Suite("Requests the server cannot take")
struct OversizeTests {
    @Test("an over-long request line is refused with a 4xx and the daemon stays up")
    func longRequestLine() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let huge = origin.thumb("/img/a.jpg?pad=" + String(repeating: "x", count: 40_000))
            let refused = try await request(daemon.port, huge)
            #expect((400..<500).contains(refused.status))
            let tooLongURL = origin.thumb("/img/a.jpg?pad=" + String(repeating: "x", count: 5_000))
            let rejected = try await request(daemon.port, tooLongURL)
            #expect(rejected.status == 400)
            #expect(rejected.errorCode == "url_too_long")
            #expect(try await request(daemon.port, origin.thumb("/img/a.jpg")).status == 200)
        }
    }
}
