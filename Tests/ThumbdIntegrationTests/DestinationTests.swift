import Foundation
import Testing

@Suite("Destinations: private addresses and the allow list")
struct DestinationTests {
    @Test("loopback is refused by default, by literal address and by resolved name")
    func loopbackRefused() async throws {
        let origin = try TestOrigin()
        let daemon = try TestDaemon { $0.upstream.allowPrivateNetworks = false }
        defer { daemon.remove(); origin.stop() }
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

    @Test("with an allow list, other hosts are refused")
    func allowList() async throws {
        let origin = try TestOrigin()
        let daemon = try TestDaemon { $0.upstream.allowHosts = ["localhost"] }
        defer { daemon.remove(); origin.stop() }
        let refused = try await request(daemon.port, origin.thumb("/img/a.jpg"))  // 127.0.0.1 is not "localhost"
        #expect(refused.status == 403)
        #expect(refused.errorCode == "host_not_allowed")
        let allowed = try await request(daemon.port, "/thumb?url=" + "http://localhost:\(origin.port)/img/a.jpg".queryEncoded)
        #expect(allowed.status == 200)
    }
}
