import Foundation
import LoopbackClient
import EventStream
import ThumbdTesting
import Testing

/// An event stream's body is framed by libmicrohttpd (chunked for HTTP/1.1, ended by the
/// close for HTTP/1.0), but while the connection is suspended thumbd writes its events to the
/// socket itself, framed as chunks of its own (`RequestContext+Stream`). These check that both agree on
/// the framing whatever the request says, with the events written while suspended.
@Suite("Event-stream framing")
struct EventStreamFramingTests {
    /// Every line of an event stream's text is a field, a comment, or the blank line that
    /// ends an event: a stray chunk-size line from a framing mismatch would be none of them
    /// (and a browser's EventSource would ignore it silently, so the test must look).
    static func strayLines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init).filter { line in
            !["retry:", "id:", "event:", "data:", ":"].contains { line.hasPrefix($0) }
        }
    }

    /// Holds a stream open on a gated item until it is suspended with nothing to send, then
    /// releases the gate: its `done` and `end` are written while the connection is suspended.
    /// Returns the head's headers, the body's text, and whether the server closed it.
    static func held(_ request: String, origin: TestOrigin, daemon: TestDaemon, gate: String) async throws
        -> (headers: [String: String], text: String, closed: Bool) {
        let batch = try await daemon.createBatch([origin.url("/gate/\(gate)")])
        let connection = try RawConnection(port: daemon.port)
        try connection.sendRaw(Array(request.replacingOccurrences(of: "PATH", with: batch.events).utf8))
        let head = try await blocking { try connection.readHead() }
        // The `retry:` line comes first, then nothing while the origin holds the item.
        var body = try await blocking { () -> [UInt8] in
            var body: [UInt8] = []
            while !String(decoding: body, as: UTF8.self).contains("retry:"), let piece = try connection.nextChunk() { body += piece }
            return body
        }
        #expect(try await eventually { try await origin.requests("/gate/\(gate)") == 1 })
        try await Task.sleep(for: .milliseconds(200))  // suspended by now: nothing more to send
        try await origin.release(gate)
        // The rest, until the server ends the body (a read that times out throws).
        body += try await blocking { () -> [UInt8] in
            var rest: [UInt8] = []
            while let piece = try connection.nextChunk() { rest += piece }
            return rest
        }
        let closed = try await blocking { try connection.nextBytes() == nil }
        connection.close()
        return (head.headers, String(decoding: body, as: UTF8.self), closed)
    }

    @Test("HTTP/1.1 with Connection: close still gets a chunked stream, events written while suspended well framed")
    func http11Close() async throws {
        try await withOriginAndDaemon({ $0.upstream.allowHosts = ["127.0.0.1"] }) { origin, daemon in
            let request = "GET PATH HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n"
            let stream = try await Self.held(request, origin: origin, daemon: daemon, gate: "close11")
            #expect(stream.headers["transfer-encoding"] == "chunked")
            #expect(stream.closed)
            #expect(Self.strayLines(stream.text) == [])
            var parser = EventStreamParser()
            parser.feed(Array(stream.text.utf8))
            #expect(parser.events.map(\.type).filter { $0 != "progress" } == ["done", "end"])  // progress: as the body comes
        }
    }

    @Test("HTTP/1.0 gets a stream ended by the close, without chunk framing")
    func http10() async throws {
        try await withOriginAndDaemon({ $0.upstream.allowHosts = ["127.0.0.1"] }) { origin, daemon in
            let request = "GET PATH HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n"
            let stream = try await Self.held(request, origin: origin, daemon: daemon, gate: "close10")
            #expect(stream.headers["transfer-encoding"] == nil)
            #expect(stream.closed)
            #expect(Self.strayLines(stream.text) == [])
            var parser = EventStreamParser()
            parser.feed(Array(stream.text.utf8))
            #expect(parser.events.map(\.type).filter { $0 != "progress" } == ["done", "end"])  // progress: as the body comes
        }
    }
}
