import Foundation
import Testing
import ThumbdTesting
@testable import ThumbdCore

@Suite("Signed URLs")
struct SigningTests {
    static let keys = ["0123456789abcdef-key-one", "fedcba9876543210-key-two"]

    @Test("the canonical form and its HMAC match an independent implementation (Python's hmac)")
    func knownVector() {
        let parameters = ["url": "https://cdn.example/a b.jpg?x=1", "w": "256", "fit": "cover", "priority": "high", "sig": "x"]
        #expect(URLSigner.canonical { parameters[$0] } == "fit=cover&url=https%3A%2F%2Fcdn.example%2Fa%20b.jpg%3Fx%3D1&w=256")
        // python3 -c 'import hmac,hashlib,base64; …' over the same text and key.
        let signer = URLSigner(keys: [Self.keys[0]])
        #expect(signer.signature { parameters[$0] } == "BAWsNFY0-c_5dH_7BVQ92g8SFOpcax2OfoFaKS2IZ88")
        #expect(signer.verify("BAWsNFY0-c_5dH_7BVQ92g8SFOpcax2OfoFaKS2IZ88") { parameters[$0] })
        #expect(!signer.verify("BAWsNFY0-c_5dH_7BVQ92g8SFOpcax2OfoFaKS2IZ89") { parameters[$0] })
        #expect(!signer.verify("not base64!") { parameters[$0] })
        #expect(!signer.verify(nil) { parameters[$0] })
    }

    private func signed(_ origin: TestOrigin, _ path: String, _ thumbnail: [String: String] = [:], key: String) -> String {
        let url = origin.url(path)
        let sig = URLSigner(keys: [key]).signature { $0 == "url" ? url : thumbnail[$0] }!
        let extra = thumbnail.keys.sorted().map { "&\($0)=\(thumbnail[$0]!)" }.joined()
        return origin.thumb(path, extra + "&sig=\(sig)")
    }

    @Test("with keys set, /thumb needs sig: missing or wrong is 403 bad_signature; every key verifies")
    func thumb() async throws {
        try await withOriginAndDaemon({ $0.signing.keys = Self.keys }) { origin, daemon in
            let unsigned = try await request(daemon.port, origin.thumb("/img/s.jpg"))
            #expect(unsigned.status == 403 && unsigned.errorCode == "bad_signature")
            let good = try await request(daemon.port, signed(origin, "/img/s.jpg", key: Self.keys[0]))
            #expect(good.status == 200)
            // Rotation: a link signed with the second key works too.
            let rotated = try await request(daemon.port, signed(origin, "/img/s.jpg", ["w": "32"], key: Self.keys[1]))
            #expect(rotated.status == 200)
            // A key thumbd does not have, or a changed parameter, is refused before any fetch.
            let foreign = try await request(daemon.port, signed(origin, "/img/t.jpg", key: "another-key-of-16-bytes"))
            #expect(foreign.status == 403 && foreign.errorCode == "bad_signature")
            let tampered = signed(origin, "/img/s.jpg", ["w": "32"], key: Self.keys[0]).replacingOccurrences(of: "w=32", with: "w=3200")
            #expect(try await request(daemon.port, tampered).status == 403)
            #expect(try await origin.requests("/img/t.jpg") == 0)
            // A placeholder still answers a page that asked for one.
            let tile = try await request(daemon.port, origin.thumb("/img/s.jpg", "&fallback=placeholder"))
            #expect(tile.status == 403 && tile[header: "Content-Type"] == "image/png")
            #expect(tile[header: "X-Thumbd-Error"] == "bad_signature")
        }
    }

    @Test("batch items carry their own sig; an unsigned item fails alone; src is signed")
    func batchItems() async throws {
        try await withOriginAndDaemon({ $0.signing.keys = Self.keys }) { origin, daemon in
            let good = origin.url("/img/b1.jpg")
            let sig = URLSigner(keys: [Self.keys[0]]).signature { ["url": good, "w": "40"][$0] }!
            let body = """
                {"w": 40, "items": [{"url": "\(good)", "sig": "\(sig)"}, {"url": "\(origin.url("/img/b2.jpg"))"}]}
                """
            let created = try await request(daemon.port, "/batches", method: "POST",
                                            headers: ["Content-Type": "application/json"], body: body)
            #expect(created.status == 201)
            let events = try JSONSerialization.jsonObject(with: Data(created.body)) as? [String: Any]
            let stream = try #require(events?["events"] as? String)
            let all = try await daemon.allEvents(stream).parser.events
            let done = all.filter { $0.type == "done" }.map(payload)
            let failed = all.filter { $0.type == "failed" }.map(payload)
            #expect(done.count == 1 && failed.count == 1)
            #expect(failed.first?["error"] as? String == "bad_signature")
            #expect(try await origin.requests("/img/b2.jpg") == 0)
            let src = try #require(done.first?["src"] as? String)
            #expect(src.contains("sig="))
            #expect(try await request(daemon.port, src)[header: "X-Thumbd-Cache"] == "hit")
        }
    }

    @Test("thumbd's own page (Origin equal to the Host) needs no sig: the daemon signs its items' src; another client still does")
    func ownPageSignedByDaemon() async throws {
        try await withOriginAndDaemon({ $0.signing.keys = Self.keys }) { origin, daemon in
            let body = """
                {"w": 40, "items": [{"url": "\(origin.url("/img/p1.jpg"))"}, {"url": "\(origin.url("/img/p2.jpg"))"}]}
                """
            let host = "127.0.0.1:\(daemon.port)"
            let created = try await request(daemon.port, "/batches", method: "POST",
                                            headers: ["Content-Type": "application/json", "Host": host, "Origin": "http://\(host)"],
                                            body: body)
            #expect(created.status == 201)
            let stream = try #require(created.json["events"] as? String)
            let done = try await daemon.allEvents(stream).parser.events.filter { $0.type == "done" }.map(payload)
            #expect(done.count == 2)
            for event in done {
                let src = try #require(event["src"] as? String)
                #expect(src.contains("sig="))
                let tile = try await request(daemon.port, src)
                #expect(tile.status == 200 && tile[header: "X-Thumbd-Cache"] == "hit", "\(src)")
            }
            // The same body from a client without Origin (curl, a script): each item needs its sig.
            let plain = try await request(daemon.port, "/batches", method: "POST", headers: ["Content-Type": "application/json"],
                                          body: body)
            let failed = try await daemon.allEvents(try #require(plain.json["events"] as? String)).parser.events
                .filter { $0.type == "failed" }.map(payload)
            #expect(failed.count == 2 && failed.allSatisfy { $0["error"] as? String == "bad_signature" })
        }
    }
}
