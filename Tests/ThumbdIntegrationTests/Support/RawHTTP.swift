import Foundation
import Glibc

/// One HTTP/1.1 response as read off the wire.
struct HTTPResult: Sendable {
    var status: Int
    var headers: [String: String]  // lower-case names
    var body: [UInt8]

    subscript(header name: String) -> String? { headers[name.lowercased()] }
    var text: String { String(decoding: body, as: UTF8.self) }

    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:]
    }

    /// The JSON error code of a thumbd error body.
    var errorCode: String? {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["error"] as? String
    }
}

struct HTTPTestError: Error, CustomStringConvertible {
    var description: String
}

/// A blocking client connection on a raw socket, so tests decide exactly when to connect,
/// send, read and hang up. Every read has a timeout: no test waits forever.
final class RawConnection: @unchecked Sendable {  // used by one task at a time
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var closed = false
    /// What this connection last sent, for errors ("which request timed out?").
    private var lastRequest = "nothing sent"
    private let port: UInt16

    /// `receiveBuffer` shrinks the socket's receive buffer (before connecting, so the window
    /// stays small): a client that does not read then soon stops taking data.
    init(port: UInt16, timeoutSeconds: Int = 20, receiveBuffer: Int32? = nil) throws {
        self.port = port
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTPTestError(description: "socket: \(errno)") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            Glibc.close(fd)
            throw HTTPTestError(description: "connect to \(port): \(String(cString: strerror(errno)))")
        }
    }

    deinit { close() }

    func send(_ method: String = "GET", _ target: String, headers: [String: String] = [:], body: [UInt8] = []) throws {
        lastRequest = "\(method) \(target.prefix(120))"
        var text = "\(method) \(target) HTTP/1.1\r\nHost: \(headers["Host"] ?? "127.0.0.1")\r\n"
        for (name, value) in headers where name != "Host" { text += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { text += "Content-Length: \(body.count)\r\n" }
        text += "\r\n"
        let bytes = Array(text.utf8) + body
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw HTTPTestError(description: "send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// Sends bytes exactly as given.
    func sendRaw(_ bytes: [UInt8]) throws {
        lastRequest = String(decoding: bytes.prefix(60), as: UTF8.self).debugDescription
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw HTTPTestError(description: "send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// True when the server closed the connection (a read returns 0 or a reset) within the
    /// socket's timeout; false when it is still open then.
    func isClosedByServer() -> Bool {
        while true {
            if !buffer.isEmpty { buffer.removeAll() }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    /// Reads one response. `head` says the request was HEAD (no body follows).
    func read(head: Bool = false) throws -> HTTPResult {
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = find([13, 10, 13, 10])
            if headerEnd == nil { try fill() }
        }
        let headText = String(decoding: buffer[..<headerEnd!], as: UTF8.self)
        buffer.removeFirst(headerEnd! + 4)
        var lines = headText.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPTestError(description: "bad status line in \(headText)")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body: [UInt8] = []
        if !head && status != 304 && status != 204 {
            if let length = headers["content-length"].flatMap(Int.init) {
                while buffer.count < length { try fill() }
                body = Array(buffer[..<length])
                buffer.removeFirst(length)
            } else {
                while (try? fill()) != nil {}
                body = buffer
                buffer = []
            }
        }
        return HTTPResult(status: status, headers: headers, body: body)
    }

    /// The next chunk of a chunked body, or nil at its end.
    func readChunk() throws -> [UInt8]? {
        var lineEnd: Int?
        while lineEnd == nil {
            lineEnd = find([13, 10])
            if lineEnd == nil { try fill() }
        }
        let sizeText = String(decoding: buffer[..<lineEnd!], as: UTF8.self).split(separator: ";").first ?? ""
        guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
            throw HTTPTestError(description: "bad chunk size \(sizeText)")
        }
        buffer.removeFirst(lineEnd! + 2)
        while buffer.count < size + 2 { try fill() }
        let chunk = Array(buffer[..<size])
        buffer.removeFirst(size + 2)
        return size == 0 ? nil : chunk
    }

    /// The next piece of a body that ends when the server closes the connection (no length,
    /// not chunked), or nil once it has. A read timing out throws.
    func readUntilClose() throws -> [UInt8]? {
        if buffer.isEmpty {
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 { throw HTTPTestError(description: "recv: \(String(cString: strerror(errno))) (port \(port), after \(lastRequest))") }
            return Array(chunk[..<n])
        }
        defer { buffer.removeAll() }
        return buffer
    }

    /// Hangs up without reading the answer.
    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { throw HTTPTestError(description: "connection closed (port \(port), after \(lastRequest))") }
        if n < 0 { throw HTTPTestError(description: "recv: \(String(cString: strerror(errno))) (port \(port), after \(lastRequest), \(buffer.count) bytes read)") }
        buffer.append(contentsOf: chunk[..<n])
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard buffer.count >= needle.count else { return nil }
        for i in 0...(buffer.count - needle.count) where buffer[i] == needle[0] {
            if Array(buffer[i..<i + needle.count]) == needle { return i }
        }
        return nil
    }
}

/// One request on a fresh connection, off the cooperative pool (the socket calls block).
func request(_ port: UInt16, _ target: String, method: String = "GET", headers: [String: String] = [:],
             body: String = "") async throws -> HTTPResult {
    try await blocking {
        let connection = try RawConnection(port: port)
        defer { connection.close() }
        try connection.send(method, target, headers: headers, body: Array(body.utf8))
        return try connection.read(head: method == "HEAD")
    }
}

func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
    }
}

/// Polls `condition` every 10 ms until it holds or `seconds` pass. Conditions hold within
/// milliseconds on an idle machine; the bound is generous because the suite runs all its
/// tests at once on two shared cores.
func eventually(_ seconds: Double = 30, _ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}

extension String {
    /// Percent-encodes a whole URL for use as a query value.
    var queryEncoded: String {
        addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~")))!
    }
}

/// The header `POST /batches` needs.
let json = ["Content-Type": "application/json"]
