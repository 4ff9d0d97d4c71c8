import Foundation
import Support

/// What thumbd's own command-line tools (`warm`, `stats`, `purge`) use: one request per
/// connection to a daemon on this machine, over the shared `HTTPConnection`, with the body
/// read whole or streamed piece by piece.
public final class DaemonConnection {
    public typealias Head = HTTPConnection.Head

    private let connection: HTTPConnection
    /// What the request says in `Host`: the address it connects to (thumbd answers only its own names).
    private let hostHeader: String

    /// `base` is `http://HOST:PORT` (an IP literal or localhost).
    public init(base: String, timeoutSeconds: Int = 60) throws {
        guard let url = URLComponents(string: base), url.scheme == "http", let host = url.host else {
            throw DaemonClientError("the server must be http://HOST:PORT, not \(base)")
        }
        let literal = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        guard let address = literal == "localhost" ? IPAddress("127.0.0.1") : IPAddress(literal) else {
            throw DaemonClientError("\(host) is not an IP address")
        }
        hostHeader = url.port.map { "\(host):\($0)" } ?? host
        do {
            connection = try HTTPConnection(address: address, port: UInt16(url.port ?? 80), host: hostHeader,
                                            timeoutSeconds: timeoutSeconds)
        } catch {
            throw DaemonClientError("cannot reach thumbd at \(base): \(error)")
        }
    }

    public func send(_ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8] = []) throws -> Head {
        var headers = headers
        headers["Connection"] = "close"
        try connection.send(method, target, headers: headers, body: body)
        return try connection.readHead(method: method)
    }

    /// The next piece of the body, or nil at its end.
    public func nextChunk() throws -> [UInt8]? { try connection.nextChunk() }

    /// The whole body.
    public func body() throws -> [UInt8] { try connection.body() }
}

public struct DaemonClientError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
