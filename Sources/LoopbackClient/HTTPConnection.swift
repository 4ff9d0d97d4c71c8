import Foundation
import Glibc
import Support

/// The one hand-written HTTP/1.1 client: a blocking socket to a daemon on this machine,
/// used by the tests alone (the command-line tools speak through `ThumbdClient`, on
/// AsyncHTTPClient), which need to say exactly when to connect, send, read and hang up.
/// Every read has a timeout.
///
/// `@unchecked Sendable`: a connection is handed between threads (a task, the blocking worker
/// it waits on) but used by one at a time, like a file handle; it has no lock of its own.
public final class HTTPConnection: @unchecked Sendable {  // used by one thread at a time, handed over whole
    public struct Head: Sendable {
        public var status: Int
        /// Lower-case names.
        public var headers: [String: String]
    }

    /// One whole response.
    public struct Response: Sendable {
        public var status: Int
        /// Lower-case names.
        public var headers: [String: String]
        public var body: [UInt8]

        public subscript(header name: String) -> String? { headers[name.lowercased()] }
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    private enum Framing {
        case chunked
        case length(Int)
        /// The body ends when the server closes the connection.
        case close
    }

    private let fd: Int32
    private let defaultHost: String
    private let peer: String
    private var buffer: [UInt8] = []
    private var framing = Framing.length(0)
    private var closed = false
    /// What this connection last sent, for errors ("which request timed out?").
    private var lastRequest = "nothing sent"

    /// Connects to `address:port`. `host` is what requests say in `Host` unless they name
    /// one. `receiveBuffer` shrinks the socket's receive buffer before connecting (so the
    /// window stays small): a client that does not read then soon stops taking data.
    public init(address: IPAddress, port: UInt16, host: String? = nil, timeoutSeconds: Int = 20,
                receiveBuffer: Int32? = nil) throws(HTTPClientError) {
        peer = "\(address.isIPv6 ? "[\(address)]" : "\(address)"):\(port)"
        defaultHost = host ?? "127.0.0.1"
        fd = socket(address.isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HTTPClientError("socket: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer {
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let rc = address.withSocketAddress(port: port) { connect(fd, $0, $1) }
        guard rc == 0 else {
            let reason = String(cString: strerror(errno))
            // Through `close()`, the one place the socket is closed: `deinit` runs for this
            // instance too (it is fully initialized), and a second `close(2)` would close
            // whatever descriptor another thread opened under the same number meanwhile.
            close()
            throw HTTPClientError("cannot connect to \(peer): \(reason)")
        }
    }

    deinit { close() }

    /// Sends a request: `Host` (from `headers` or the default), the headers, and a
    /// Content-Length when there is a body or the method is POST.
    public func send(_ method: String = "GET", _ target: String, headers: [String: String] = [:],
                     body: [UInt8] = []) throws(HTTPClientError) {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: \(headers["Host"] ?? defaultHost)\r\n"
        for (name, value) in headers where name != "Host" { text += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { text += "Content-Length: \(body.count)\r\n" }
        try sendRaw(Array((text + "\r\n").utf8) + body)
        lastRequest = "\(method) \(target.prefix(120))"
    }

    /// Sends bytes exactly as given.
    public func sendRaw(_ bytes: [UInt8]) throws(HTTPClientError) {
        lastRequest = String(decoding: bytes.prefix(60), as: UTF8.self).debugDescription
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }  // a signal came first: nothing was sent
            guard n > 0 else { throw HTTPClientError("send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// Reads a response's head; the body then comes from `nextChunk` or `body`. `method`
    /// is the request's (a HEAD answer has no body).
    public func readHead(method: String = "GET") throws(HTTPClientError) -> Head {
        var end: Int?
        while end == nil {
            end = find([13, 10, 13, 10])
            if end == nil { try fill() }
        }
        let text = String(decoding: buffer[..<end!], as: UTF8.self)
        buffer.removeFirst(end! + 4)
        var lines = text.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw HTTPClientError("bad status line in \(text)")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        if method == "HEAD" || status == 304 || status == 204 || (100..<200).contains(status) {
            framing = .length(0)
        } else if headers["transfer-encoding"]?.lowercased() == "chunked" {
            framing = .chunked
        } else if let length = headers["content-length"].flatMap(Int.init) {
            framing = .length(length)
        } else {
            framing = .close
        }
        return Head(status: status, headers: headers)
    }

    /// The next piece of the body, as it arrives (a chunk of a chunked body), or nil at
    /// its end. A read timing out throws.
    public func nextChunk() throws(HTTPClientError) -> [UInt8]? {
        switch framing {
        case .chunked:
            var lineEnd: Int?
            while lineEnd == nil {
                lineEnd = find([13, 10])
                if lineEnd == nil { try fill() }
            }
            let sizeText = String(decoding: buffer[..<lineEnd!], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else {
                throw HTTPClientError("bad chunk size \(sizeText)")
            }
            buffer.removeFirst(lineEnd! + 2)
            while buffer.count < size + 2 { try fill() }
            let chunk = Array(buffer[..<size])
            buffer.removeFirst(size + 2)
            if size == 0 { framing = .length(0) }
            return size == 0 ? nil : chunk
        case .length(let left):
            guard left > 0 else { return nil }
            if buffer.isEmpty { try fill() }
            let piece = Array(buffer.prefix(left))
            buffer.removeFirst(piece.count)
            framing = .length(left - piece.count)
            return piece
        case .close:
            return try nextBytes()
        }
    }

    /// Whatever arrives next, framing ignored (a test reading an answer byte for byte), or
    /// nil once the server has closed the connection.
    public func nextBytes() throws(HTTPClientError) -> [UInt8]? {
        if buffer.isEmpty {
            guard try fill(endIsError: false) else { return nil }
        }
        defer { buffer.removeAll() }
        return buffer
    }

    /// The rest of the body.
    public func body() throws(HTTPClientError) -> [UInt8] {
        var all: [UInt8] = []
        while let chunk = try nextChunk() { all += chunk }
        return all
    }

    /// Reads one whole response. `head` says the request was HEAD (no body follows).
    public func read(head: Bool = false) throws(HTTPClientError) -> Response {
        let start = try readHead(method: head ? "HEAD" : "GET")
        return Response(status: start.status, headers: start.headers, body: try body())
    }

    /// True when the server closed the connection (a read returns 0 or a reset) within the
    /// socket's timeout; false when it is still open then. Discards what arrives meanwhile.
    public func isClosedByServer() -> Bool {
        buffer.removeAll()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = receive(into: &chunk)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }

    /// Hangs up (without reading the answer, if there is one).
    public func close() {
        guard !closed else { return }
        closed = true
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Reads more into the buffer. Returns false at the end of the stream when
    /// `endIsError` is false.
    @discardableResult
    private func fill(endIsError: Bool = true) throws(HTTPClientError) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = receive(into: &chunk)
        if n == 0 {
            if endIsError { throw HTTPClientError("connection closed by \(peer) after \(lastRequest)") }
            return false
        }
        if n < 0 {
            throw HTTPClientError("recv: \(String(cString: strerror(errno))) (\(peer), after \(lastRequest), \(buffer.count) bytes read)")
        }
        buffer.append(contentsOf: chunk[..<n])
        return true
    }

    /// One `recv(2)`, again when a signal interrupts it before any byte came. With a receive
    /// timeout set, Linux never restarts a socket read after a signal handler ran, even one
    /// installed with SA_RESTART (signal(7)): a profiler's or a debugger's signal would
    /// otherwise fail the read. Each try waits up to the timeout afresh.
    private func receive(into chunk: inout [UInt8]) -> Int {
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            return n
        }
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard buffer.count >= needle.count else { return nil }
        for i in 0...(buffer.count - needle.count) where buffer[i] == needle[0] {
            if buffer[i..<i + needle.count].elementsEqual(needle) { return i }
        }
        return nil
    }
}

public struct HTTPClientError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
