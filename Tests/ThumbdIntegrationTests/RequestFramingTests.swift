import Foundation
import Testing
import ThumbdTesting

/// Request framing and deadlines: requests whose framing is ambiguous or too big for the
/// connection pool get their 4xx at once and a close; slow clients meet a deadline; past
/// the connection limit a client gets 503, not a place in the backlog.
@Suite("Request framing, deadlines and the connection limit")
struct RequestFramingTests {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var raw: String
        var status: Int
        /// Refused by libmicrohttpd itself, with its own HTML page and no header of ours.
        var byLibrary = false
        var description: String { name }
    }

    static let host = "Host: 127.0.0.1\r\n"
    static let post = "POST /batches HTTP/1.1\r\n\(host)Content-Type: application/json\r\n"
    static let cases: [Case] = [
        Case(name: "Transfer-Encoding gzip", raw: post + "Transfer-Encoding: gzip\r\n\r\nabc", status: 400),
        Case(name: "Transfer-Encoding identity", raw: post + "Transfer-Encoding: identity\r\n\r\n", status: 400),
        Case(name: "Transfer-Encoding bogus on GET", raw: "GET /healthz HTTP/1.1\r\n\(host)Transfer-Encoding: bogus\r\n\r\n", status: 400),
        Case(name: "chunked, identity", raw: post + "Transfer-Encoding: chunked, identity\r\n\r\n", status: 400),
        Case(name: "two Transfer-Encoding fields", raw: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400),
        Case(name: "chunked with Content-Length", raw: post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400),
        Case(name: "two different Content-Length", raw: post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n{\"a\":1}", status: 400),
        Case(name: "a Content-Length list that disagrees", raw: post + "Content-Length: 5, 6\r\n\r\n{\"a\":1}", status: 400, byLibrary: true),
        Case(name: "Content-Length not a number", raw: post + "Content-Length: 5x\r\n\r\n{}", status: 400, byLibrary: true),
        Case(name: "Content-Length 2^63", raw: post + "Content-Length: 9223372036854775808\r\n\r\n{", status: 413),
        Case(name: "Content-Length past the body limit", raw: post + "Content-Length: 99999999\r\n\r\n{", status: 413),
        Case(name: "HTTP/1.1 without Host", raw: "GET /healthz HTTP/1.1\r\n\r\n", status: 400),
        Case(name: "150 query parameters", raw: "GET /thumb?" + (0..<150).map { "a\($0)=b" }.joined(separator: "&") + " HTTP/1.1\r\n\(host)\r\n", status: 414),
        Case(name: "1000 empty query parameters", raw: "GET /thumb?" + String(repeating: "&", count: 1000) + " HTTP/1.1\r\n\(host)\r\n", status: 414),
    ]

    @Test("answered at once with a 4xx, then closed", arguments: cases)
    func refused(_ row: Case) async throws {
        let daemon = try TestDaemon()
        defer { daemon.remove() }
        // Timed inside the blocking call: the suite's own threads may wait for a place first.
        let (result, closed, elapsed) = try await blocking {
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 5)
            let started = ContinuousClock.now
            try connection.sendRaw(Array(row.raw.utf8))
            let result = try connection.read()
            return (result, connection.isClosedByServer(), ContinuousClock.now - started)
        }
        #expect(result.status == row.status, "\(result.text)")
        // thumbd's own refusals carry an id, as every answer does; libmicrohttpd's cannot.
        if !row.byLibrary {
            #expect(result[header: "X-Request-Id"].map { $0.count == 15 && $0.allSatisfy(\.isHexDigit) } == true, "\(result.text)")
        }
        #expect(closed)
        #expect(elapsed < .seconds(4))
        #expect(try await request(daemon.port, "/healthz").status == 200)
    }

    @Test("a client trickling its headers is closed at the request deadline, with 408")
    func trickle() async throws {
        let daemon = try TestDaemon { $0.server.requestTimeoutSeconds = 1 }
        defer { daemon.remove() }
        let (answer, elapsed) = try await blocking { () -> ([UInt8], Duration) in
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 10)
            let started = ContinuousClock.now
            try connection.sendRaw(Array("GET /healthz HTTP/1.1\r\n".utf8))
            var received: [UInt8] = []
            for _ in 0..<40 {  // a byte every 100 ms: MHD's idle timeout alone never fires
                guard (try? connection.sendRaw([UInt8(ascii: "X")])) != nil else { break }
                Thread.sleep(forTimeInterval: 0.1)
            }
            while let chunk = try? connection.nextBytes() { received += chunk }
            return (received, ContinuousClock.now - started)
        }
        #expect(String(decoding: answer, as: UTF8.self).hasPrefix("HTTP/1.1 408"))
        #expect(elapsed < .seconds(5))
    }

    @Test("before a request line, a connection is closed after the idle timeout whatever it sends")
    func trickleRequestLine() async throws {
        let daemon = try TestDaemon { $0.server.idleTimeoutSeconds = 1 }
        defer { daemon.remove() }
        let (closed, elapsed) = try await blocking { () -> (Bool, Duration) in
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 10)
            let started = ContinuousClock.now
            for _ in 0..<60 {  // "GET /aaaa…" one byte every 100 ms, never a whole line
                guard (try? connection.sendRaw([UInt8(ascii: "a")])) != nil else { return (true, ContinuousClock.now - started) }
                Thread.sleep(forTimeInterval: 0.1)
            }
            return (connection.isClosedByServer(), ContinuousClock.now - started)
        }
        #expect(closed)
        #expect(elapsed < .seconds(5))
    }

    @Test("past server.maxConnections a new client gets 503 at once; below it, it is served")
    func connectionLimit() async throws {
        let daemon = try TestDaemon { $0.server.maxConnections = 16 }
        defer { daemon.remove() }
        let held = try (0..<16).map { _ in try RawConnection(port: daemon.port, timeoutSeconds: 5) }
        // Each held connection has been accepted (the daemon answers a request on it).
        for connection in held {
            try connection.send("GET", "/healthz")
            #expect(try connection.read().status == 200)
        }
        let (extra, elapsed) = try await blocking { () -> (HTTPResult, Duration) in
            let started = ContinuousClock.now
            let connection = try RawConnection(port: daemon.port, timeoutSeconds: 5)
            return (try connection.read(), ContinuousClock.now - started)
        }
        #expect(extra.status == 503)
        #expect(extra.errorCode == "too_many_connections")
        #expect(extra[header: "X-Request-Id"]?.count == 15)  // a canned answer, with an id of its own
        #expect(elapsed < .seconds(3))
        held.forEach { $0.close() }
        #expect(try await eventually(10) { (try? await request(daemon.port, "/healthz").status) == 200 })
    }
}
