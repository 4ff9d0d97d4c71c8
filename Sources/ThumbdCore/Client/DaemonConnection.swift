import Foundation
import Glibc

/// A small HTTP/1.1 client for thumbd's own command-line tools (`warm`, `stats`, `purge`):
/// one request per connection over a blocking socket, with the body read whole or
/// streamed chunk by chunk. It talks to a daemon on this machine, nothing else.
public final class DaemonConnection {
    public struct Head: Sendable {
        public var status: Int
        public var headers: [String: String]
    }

    private let fd: Int32
    /// What the request says in `Host`: the address it connects to (thumbd answers only its own names).
    private let hostHeader: String
    private var buffer: [UInt8] = []
    private var chunked = false
    private var remaining: Int?

    /// `base` is `http://HOST:PORT` (IPv4 or localhost).
    public init(base: String, timeoutSeconds: Int = 60) throws {
        guard let url = URLComponents(string: base), url.scheme == "http", let host = url.host else {
            throw DaemonClientError("the server must be http://HOST:PORT, not \(base)")
        }
        let port = UInt16(url.port ?? 80)
        hostHeader = url.port.map { "\(host):\($0)" } ?? host
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DaemonClientError("socket: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr) == 1 else {
            Glibc.close(fd)
            throw DaemonClientError("\(host) is not an IPv4 address")
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw DaemonClientError("cannot reach thumbd at \(base): \(reason)")
        }
    }

    deinit { Glibc.close(fd) }

    public func send(_ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8] = []) throws -> Head {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: \(hostHeader)\r\nConnection: close\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { text += "Content-Length: \(body.count)\r\n" }
        let bytes = Array((text + "\r\n").utf8) + body
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw DaemonClientError("send: \(String(cString: strerror(errno)))") }
            sent += n
        }
        var end: Int?
        while end == nil {
            end = find([13, 10, 13, 10])
            if end == nil { try fill() }
        }
        let head = String(decoding: buffer[..<end!], as: UTF8.self)
        buffer.removeFirst(end! + 4)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { throw DaemonClientError("bad answer: \(head)") }
        var fields: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        chunked = fields["transfer-encoding"]?.lowercased() == "chunked"
        remaining = fields["content-length"].flatMap(Int.init)
        if method == "HEAD" || status == 304 || status == 204 { remaining = 0 }
        return Head(status: status, headers: fields)
    }

    /// The next piece of the body, or nil at its end.
    public func nextChunk() throws -> [UInt8]? {
        if chunked {
            var lineEnd: Int?
            while lineEnd == nil {
                lineEnd = find([13, 10])
                if lineEnd == nil { try fill() }
            }
            let sizeText = String(decoding: buffer[..<lineEnd!], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
                throw DaemonClientError("bad chunk size")
            }
            buffer.removeFirst(lineEnd! + 2)
            while buffer.count < size + 2 { try fill() }
            let chunk = Array(buffer[..<size])
            buffer.removeFirst(size + 2)
            return size == 0 ? nil : chunk
        }
        if let left = remaining {
            guard left > 0 else { return nil }
            if buffer.isEmpty { try fill() }
            let piece = Array(buffer.prefix(left))
            buffer.removeFirst(piece.count)
            remaining = left - piece.count
            return piece
        }
        if buffer.isEmpty, (try? fill()) == nil { return nil }
        defer { buffer.removeAll() }
        return buffer
    }

    /// The whole body.
    public func body() throws -> [UInt8] {
        var all: [UInt8] = []
        while let chunk = try nextChunk() { all += chunk }
        return all
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { throw DaemonClientError("thumbd closed the connection") }
        if n < 0 { throw DaemonClientError("recv: \(String(cString: strerror(errno)))") }
        buffer.append(contentsOf: chunk[..<n])
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard buffer.count >= needle.count else { return nil }
        for i in 0...(buffer.count - needle.count) where buffer[i] == needle[0] && buffer[i + 1] == needle[1] {
            if Array(buffer[i..<i + needle.count]) == needle { return i }
        }
        return nil
    }
}

public struct DaemonClientError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
