import Foundation
import Testing
import ThumbdTesting

@Suite("Destinations: private addresses and the allow list")
struct DestinationTests {
    @Test("loopback is refused by default, by literal address and by resolved name")
    func loopbackRefused() async throws {
        try await withOriginAndDaemon({ $0.upstream.allowPrivateNetworks = false }) { origin, daemon in
            let literal = try await request(daemon.port, origin.thumb("/img/secret.jpg"))
            #expect(literal.status == 403)
            #expect(literal.errorCode == "destination_not_allowed")
            let byName = try await request(daemon.port, "/thumb?url=" + "http://localhost:\(origin.port)/img/secret.jpg".queryEncoded)
            #expect(byName.status == 403)
            #expect(byName.errorCode == "destination_not_allowed")
            let mapped = try await request(daemon.port, "/thumb?url=" + "http://[::ffff:127.0.0.1]:\(origin.port)/img/secret.jpg".queryEncoded)
            #expect(mapped.status == 403)
            // Refused before any request was sent.
            #expect(try await origin.requests("/img/secret.jpg") == 0)
        }
    }

    /// Destinations before connecting: the check ran after the TCP connect, so a page could tell open
    /// loopback ports from closed ones (403 vs 502). Now no connection is made at all.
    @Test("a name that resolves to loopback is refused before connecting: open and closed ports answer alike",
          arguments: ["http://localhost:%d/x.jpg", "https://localhost:%d/x.jpg"])
    func noPortScan(_ pattern: String) async throws {
        let listener = try Listener()
        let closed = try ClosedPort()
        let daemon = try TestDaemon { $0.upstream.allowPrivateNetworks = false }
        defer { daemon.remove() }
        func ask(_ port: UInt16) async throws -> HTTPResult {
            try await request(daemon.port, "/thumb?url=" + String(format: pattern, Int(port)).queryEncoded)
        }
        let open = try await ask(listener.port)
        let shut = try await ask(closed.port)
        #expect(open.status == 403)
        #expect(open.errorCode == "destination_not_allowed")
        #expect(shut.status == open.status)
        #expect(shut.text == open.text)
        #expect(listener.pendingConnections() == 0, "thumbd connected to the internal port")
    }

    @Test("legacy IPv4 spellings and zone indexes are refused without a connection",
          arguments: ["127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0", "[::1%25lo]", "[::ffff:0:127.0.0.1]",
                      "[::127.0.0.1]", "[64:ff9b::127.0.0.1]", "[2002:7f00:1::1]"])
    func legacySpellings(_ host: String) async throws {
        let listener = try Listener()
        let daemon = try TestDaemon { $0.upstream.allowPrivateNetworks = false }
        defer { daemon.remove() }
        let result = try await request(daemon.port, "/thumb?url=" + "http://\(host):\(listener.port)/x.jpg".queryEncoded)
        #expect(result.status == 403)
        #expect(result.errorCode == "destination_not_allowed")
        #expect(listener.pendingConnections() == 0)
    }

    @Test("with an allow list, other hosts are refused")
    func allowList() async throws {
        try await withOriginAndDaemon({ $0.upstream.allowHosts = ["localhost"] }) { origin, daemon in
            let refused = try await request(daemon.port, origin.thumb("/img/a.jpg"))  // 127.0.0.1 is not "localhost"
            #expect(refused.status == 403)
            #expect(refused.errorCode == "host_not_allowed")
            let allowed = try await request(daemon.port, "/thumb?url=" + "http://localhost:\(origin.port)/img/a.jpg".queryEncoded)
            #expect(allowed.status == 200)
        }
    }
}

/// `upstream.proxy`: every fetch goes through a parent cache. The test origin answers
/// absolute-form requests as a proxy would, so it stands in for Varnish here (the bench runs
/// the real one).
@Suite("Fetching through a parent proxy")
struct ParentProxyTests {
    @Test("fetches go to the proxy in absolute form; thumbd never resolves the origin's name itself")
    func throughProxy() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        // Private networks stay refused: the proxy the operator configured is the one
        // loopback address thumbd may connect to. `.invalid` never resolves (RFC 6761):
        // only the proxy could make sense of it.
        let daemon = try TestDaemon {
            $0.upstream.allowPrivateNetworks = false
            $0.upstream.proxy = "http://127.0.0.1:\(origin.port)"
        }
        defer { daemon.remove() }
        let target = "/thumb?url=" + "http://images.invalid/img/p.jpg".queryEncoded
        let first = try await request(daemon.port, target)
        #expect(first.status == 200 && first[header: "X-Thumbd-Cache"] == "miss")
        #expect(try await origin.stats().proxied == ["http://images.invalid/img/p.jpg"])
        #expect(try await request(daemon.port, target)[header: "X-Thumbd-Cache"] == "hit")
        // The policy still judges the URL itself: a literal private address is refused
        // before anything is sent to the proxy.
        let refused = try await request(daemon.port, "/thumb?url=" + "http://10.1.2.3/a.jpg".queryEncoded)
        #expect(refused.status == 403 && refused.errorCode == "destination_not_allowed")
        #expect(try await origin.stats().proxied.count == 1)
    }
}
