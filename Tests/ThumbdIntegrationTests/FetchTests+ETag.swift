import Foundation
import Testing
import ThumbdTesting

/// Where an original's ETag comes from: the origin's strong ETag when it sends one (with the
/// URL and the length), the body's own hash otherwise.
@Suite("GET /thumb: the original's ETag")
struct ETagTests {
    /// Two different images of the same length, from the origin's padded JPEGs.
    private static func twins(_ origin: TestOrigin) async throws -> ([UInt8], [UInt8]) {
        let one = try await origin.direct("/img/twin-a.jpg?size=5000")
        let other = try await origin.direct("/img/twin-b.jpg?size=5000")
        #expect(one != other && one.count == other.count)
        return (one, other)
    }

    private func etag(_ daemon: TestDaemon, _ origin: TestOrigin, _ path: String) async throws -> String {
        let answer = try await request(daemon.port, origin.thumb(path))
        #expect(answer.status == 200, "\(path): \(answer.text)")
        return try #require(answer[header: "ETag"])
    }

    private func purge(_ daemon: TestDaemon, _ origin: TestOrigin, _ path: String) async throws {
        let answer = try await request(daemon.port, "/cache?url=\(origin.url(path).queryEncoded)", method: "DELETE")
        #expect(answer.status == 200, "\(answer.text)")
    }

    @Test("with the origin's strong ETag: the same ETag, URL and length give the same ETag, whatever the bytes; any of them changed, another")
    func fromOrigin() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let (one, other) = try await Self.twins(origin)
            let v1 = "/file/e?etag=" + "\"v1\"".queryEncoded
            try await origin.put("e", one)
            let first = try await etag(daemon, origin, v1)
            #expect(first.hasPrefix("\"") && first.hasSuffix("\"") && first.utf8.count == 34)

            // Other bytes of the same length under the same ETag: the origin says they are
            // the same, and its word is taken (the body is not hashed).
            try await purge(daemon, origin, v1)
            try await origin.put("e", other)
            let answer = try await request(daemon.port, origin.thumb(v1))
            #expect(answer.body == other)
            #expect(answer[header: "ETag"] == first)

            // The origin's ETag changed, the URL, or the length: another ETag.
            #expect(try await etag(daemon, origin, "/file/e?etag=" + "\"v2\"".queryEncoded) != first)
            try await origin.put("f", other)
            #expect(try await etag(daemon, origin, "/file/f?etag=" + "\"v1\"".queryEncoded) != first)
            try await purge(daemon, origin, v1)
            try await origin.put("e", try await origin.direct("/img/twin-a.jpg?size=5001"))
            #expect(try await etag(daemon, origin, v1) != first)
        }
    }

    @Test("without an ETag from the origin, or with a weak one: the body's own hash, the same at any URL")
    func fromBody() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let (one, other) = try await Self.twins(origin)
            for name in ["g", "h"] { try await origin.put(name, one) }
            try await origin.put("i", other)
            let plain = try await etag(daemon, origin, "/file/g")
            #expect(try await etag(daemon, origin, "/file/h") == plain)
            #expect(try await etag(daemon, origin, "/file/h?etag=" + "W/\"v1\"".queryEncoded) == plain)
            #expect(try await etag(daemon, origin, "/file/i") != plain)
        }
    }
}
