import Foundation
import TestThreads
import Testing
import ThumbdTesting

/// thumbd against a real HTTP/2 origin (nginx with `http2` on TLS, a certificate from a CA
/// the test makes): verification on, many transfers over one connection.
@Suite("An HTTP/2 origin over TLS", .ownThreads)
struct HTTP2OriginTests {
    @Test("24 images at once from an HTTP/2 origin: verified TLS, all over HTTP/2, multiplexed on one or two connections")
    func multiplexed() async throws {
        let files = Dictionary(uniqueKeysWithValues: try (0..<24).map {
            ("i\($0).png", try ThumbnailTests.thumbnailer.testImage(width: 40 + $0, height: 30, format: .png).array)
        })
        // Made off the cooperative pool: openssl and nginx's start are waited for.
        let origin = try await blocking { try TestTLSOrigin(files: files) }
        defer { origin.stop() }
        let daemon = try TestDaemon { $0.upstream.caFile = origin.caFile }
        defer { daemon.remove() }
        let targets = (0..<24).map { "/thumb?url=" + origin.url("i\($0).png").queryEncoded }
        // All at once, read on one thread (the dispatch pool is shared with other suites).
        let results = try await blocking { () -> [HTTPResult] in
            let connections = try targets.map { _ in try RawConnection(port: daemon.port) }
            for (connection, target) in zip(connections, targets) { try connection.send("GET", target) }
            return try connections.map { try $0.read() }
        }
        #expect(results.allSatisfy { $0.status == 200 && $0[header: "Content-Type"] == "image/png" })
        #expect(results.enumerated().allSatisfy { index, result in result.body == files["i\(index).png"] })
        let logged = origin.requests()
        #expect(logged.count == 24)
        #expect(logged.allSatisfy { $0.protocol == "HTTP/2.0" }, "\(logged.map(\.protocol))")
        let connections = Set(logged.map(\.connection))
        #expect(connections.count <= 2, "24 transfers took \(connections.count) connections")
    }

    @Test("under a small upstream.maxBufferedBytes, large bodies over one HTTP/2 connection pause and resume, and arrive whole")
    func pausedStreams() async throws {
        // A PNG with 600 KB after its end (decoders stop at IEND; the bytes are served as they came).
        let files = Dictionary(uniqueKeysWithValues: try (0..<8).map { index in
            let png = try ThumbnailTests.thumbnailer.testImage(width: 20 + index, height: 20, format: .png).array
            return ("big\(index).png", png + (0..<600_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
        })
        let origin = try await blocking { try TestTLSOrigin(files: files) }
        defer { origin.stop() }
        let daemon = try TestDaemon {
            $0.upstream.caFile = origin.caFile
            $0.upstream.maxBufferedBytes = 1 << 20  // one body fits, a second goes past: six wait, paused
        }
        defer { daemon.remove() }
        let targets = (0..<8).map { "/thumb?url=" + origin.url("big\($0).png").queryEncoded }
        let results = try await blocking { () -> [HTTPResult] in
            let connections = try targets.map { _ in try RawConnection(port: daemon.port) }
            for (connection, target) in zip(connections, targets) { try connection.send("GET", target) }
            return try connections.map { try $0.read() }
        }
        #expect(results.allSatisfy { $0.status == 200 })
        #expect(results.enumerated().allSatisfy { index, result in result.body == files["big\(index).png"] })
        #expect(origin.requests().allSatisfy { $0.protocol == "HTTP/2.0" })
    }

    @Test("verification is on: without the test CA the same origin is refused")
    func verified() async throws {
        let image = try ThumbnailTests.thumbnailer.testImage(width: 8, height: 8, format: .png).array
        let origin = try await blocking { try TestTLSOrigin(files: ["a.png": image]) }
        defer { origin.stop() }
        let daemon = try TestDaemon()
        defer { daemon.remove() }
        let refused = try await request(daemon.port, "/thumb?url=" + origin.url("a.png").queryEncoded)
        #expect(refused.status == 502 && refused.errorCode == "upstream_failed")
        #expect(origin.requests().isEmpty)
    }
}
