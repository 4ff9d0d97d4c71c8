import Foundation
import Testing
import ThumbdTesting

/// Safe beside a browser: DNS rebinding and cross-site requests from pages in the user's browser.
@Suite("Host names, origins and content types a browser page could abuse")
struct RequestGuardTests {
    @Test("a foreign Host is 421 everywhere; the cache is not purged")
    func rebinding() async throws {
        try await withOriginAndDaemon { origin, daemon in
            #expect(try await request(daemon.port, origin.thumb("/img/keep.jpg")).status == 200)
            let foreign = ["Host": "attacker.example:\(daemon.port)"]
            for (method, target) in [("DELETE", "/cache"), ("GET", "/stats"), ("GET", origin.thumb("/img/a.jpg")),
                                     ("POST", "/batches"), ("GET", "/"), ("GET", "/healthz")] {
                let result = try await request(daemon.port, target, method: method,
                                               headers: foreign.merging(json) { a, _ in a }, body: method == "POST" ? "{\"urls\":[]}" : "")
                #expect(result.status == 421, "\(method) \(target)")
                #expect(result.errorCode == "misdirected_request")
            }
            #expect(try await request(daemon.port, origin.thumb("/img/keep.jpg"))[header: "x-thumbd-cache"] == "hit")
            for host in ["127.0.0.1:\(daemon.port)", "localhost:\(daemon.port)", "[::1]:\(daemon.port)", "LOCALHOST", "localhost."] {
                #expect(try await request(daemon.port, "/healthz", headers: ["Host": host]).status == 200, "\(host)")
            }
        }
    }

    @Test("server.allowedHosts adds names; '*' allows any")
    func allowedHosts() async throws {
        let daemon = try TestDaemon { $0.server.allowedHosts = ["thumbd.internal"] }
        defer { daemon.remove() }
        #expect(try await request(daemon.port, "/healthz", headers: ["Host": "thumbd.internal:8080"]).status == 200)
        #expect(try await request(daemon.port, "/healthz", headers: ["Host": "other.internal"]).status == 421)
        for host in ["THUMBD.Internal", "thumbd.internal.", "[thumbd.internal]:1"] {
            #expect(try await request(daemon.port, "/healthz", headers: ["Host": host]).status == 200, "\(host)")
        }
        for host in ["thumbd.interna", "thumbd.internals", "xthumbd.internal", "thumbd.internal:1:2"] {
            #expect(try await request(daemon.port, "/healthz", headers: ["Host": host]).status == 421, "\(host)")
        }
        let any = try TestDaemon { $0.server.allowedHosts = ["*"] }
        defer { any.remove() }
        #expect(try await request(any.port, "/healthz", headers: ["Host": "other.internal"]).status == 200)
    }

    @Test("/thumbd.js is a JavaScript module, with CORS for an origin in server.allowedOrigins only; the page imports it")
    func clientModule() async throws {
        try await withOriginAndDaemon({ $0.server.allowedOrigins = ["http://127.0.0.1:9999"] }) { _, daemon in
            let allowed = try await request(daemon.port, "/thumbd.js", headers: ["Origin": "http://127.0.0.1:9999"])
            #expect(allowed.status == 200 && allowed[header: "Content-Type"] == "text/javascript; charset=utf-8")
            #expect(allowed[header: "Access-Control-Allow-Origin"] == "http://127.0.0.1:9999")
            #expect(allowed.text.contains("export function createGrid("))
            let other = try await request(daemon.port, "/thumbd.js", headers: ["Origin": "http://attacker.example"])
            #expect(other.status == 200 && other[header: "Access-Control-Allow-Origin"] == nil)
            let page = try await request(daemon.port, "/")
            #expect(page.text.contains("import { createGrid } from \"/thumbd.js\""))
            #expect(page[header: "Content-Security-Policy"]?.contains("script-src 'self'") == true)
            #expect(try await request(daemon.port, "/thumbd.js", method: "POST").status == 405)
        }
    }

    @Test("HTTP/1.1 without Host is 400; HTTP/1.0 without Host is answered")
    func missingHost() async throws {
        let daemon = try TestDaemon()
        defer { daemon.remove() }
        let eleven = try await blocking {
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 5)
            try connection.sendRaw(Array("GET /healthz HTTP/1.1\r\n\r\n".utf8))
            return try connection.read()
        }
        #expect(eleven.status == 400)
        #expect(eleven.errorCode == "missing_host")
        let ten = try await blocking {
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 5)
            try connection.sendRaw(Array("GET /healthz HTTP/1.0\r\n\r\n".utf8))
            return try connection.read()
        }
        #expect(ten.status == 200)
    }

    @Test("state-changing requests from a foreign Origin are 403; GETs from anywhere are answered")
    func foreignOrigin() async throws {
        try await withOriginAndDaemon { origin, daemon in
            #expect(try await request(daemon.port, origin.thumb("/img/keep.jpg")).status == 200)
            let attacker = ["Origin": "http://attacker.example"]
            let purge = try await request(daemon.port, "/cache", method: "DELETE", headers: attacker)
            #expect(purge.status == 403)
            #expect(purge.errorCode == "origin_not_allowed")
            let post = try await request(daemon.port, "/batches", method: "POST", headers: attacker.merging(json) { a, _ in a },
                                         body: "{\"urls\":[\"\(origin.url("/img/x.jpg"))\"]}")
            #expect(post.status == 403)
            #expect(try await request(daemon.port, "/cache", method: "DELETE", headers: ["Origin": "null"]).status == 403)
            #expect(try await request(daemon.port, origin.thumb("/img/keep.jpg"), headers: attacker)[header: "x-thumbd-cache"] == "hit")
            // The page thumbd serves posts with its own origin.
            let own = ["Origin": "http://127.0.0.1:\(daemon.port)", "Host": "127.0.0.1:\(daemon.port)"]
            let mine = try await request(daemon.port, "/batches", method: "POST", headers: own.merging(json) { a, _ in a },
                                         body: "{\"urls\":[\"\(origin.url("/img/x.jpg"))\"]}")
            #expect(mine.status == 201)
            #expect(try await request(daemon.port, "/stats", headers: attacker).status == 200)
        }
    }

    @Test("POST /batches without Content-Type: application/json is 415",
          arguments: [nil, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"])
    func contentType(_ type: String?) async throws {
        let daemon = try TestDaemon()
        defer { daemon.remove() }
        let headers = type.map { ["Content-Type": $0] } ?? [:]
        let result = try await request(daemon.port, "/batches", method: "POST", headers: headers,
                                       body: "{\"urls\":[\"http://127.0.0.1:9/a.jpg\"]}")
        #expect(result.status == 415)
        #expect(result.errorCode == "unsupported_media_type")
        let ok = try await request(daemon.port, "/batches", method: "POST", headers: ["Content-Type": "Application/JSON; charset=utf-8"],
                                   body: "{\"urls\":[\"http://127.0.0.1:9/a.jpg\"]}")
        #expect(ok.status == 201)
    }

    @Test("server.allowedOrigins: preflights answered, CORS headers on responses; others refused")
    func cors() async throws {
        try await withOriginAndDaemon({ $0.server.allowedOrigins = ["https://app.example"] }) { origin, daemon in
            let app = ["Origin": "https://app.example"]
            let preflight = try await request(daemon.port, "/batches", method: "OPTIONS",
                                              headers: app.merging(["Access-Control-Request-Method": "POST"]) { a, _ in a })
            #expect(preflight.status == 204)
            #expect(preflight[header: "access-control-allow-origin"] == "https://app.example")
            #expect(preflight[header: "access-control-allow-headers"]?.contains("Content-Type") == true)
            let post = try await request(daemon.port, "/batches", method: "POST", headers: app.merging(json) { a, _ in a },
                                         body: "{\"urls\":[\"\(origin.url("/img/x.jpg"))\"]}")
            #expect(post.status == 201)
            #expect(post[header: "access-control-allow-origin"] == "https://app.example")
            let thumb = try await request(daemon.port, origin.thumb("/img/y.jpg"), headers: app)  // answered after a suspension
            #expect(thumb[header: "access-control-allow-origin"] == "https://app.example")
            let other = try await request(daemon.port, "/batches", method: "OPTIONS", headers: ["Origin": "https://evil.example"])
            #expect(other.status == 403)
            #expect(other[header: "access-control-allow-origin"] == nil)
        }
    }
}
