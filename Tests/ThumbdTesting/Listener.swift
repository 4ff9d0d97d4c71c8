import Foundation
import Glibc

/// A bare listening socket on 127.0.0.1 that never accepts: the kernel completes any TCP
/// handshake into its backlog, so `pendingConnections` shows whether anybody connected at
/// all, before sending a single byte. `closedPort` is a port with nobody listening.
package final class Listener: @unchecked Sendable {  // immutable after init
    package let port: UInt16
    private let fd: Int32

    package init() throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        port = try Self.bind(fd)
        guard listen(fd, 64) == 0 else { throw HTTPTestError(description: "listen: \(errno)") }
    }

    deinit { close(fd) }

    /// Connections completed so far (accepted here and closed).
    package func pendingConnections() -> Int {
        var count = 0
        while true {
            let client = accept(fd, nil, nil)
            if client < 0 { return count }
            close(client)
            count += 1
        }
    }

    /// A port that was free a moment ago and has no listener.
    package static func closedPort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        return try bind(fd)
    }

    private static func bind(_ fd: Int32) throws -> UInt16 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let rc = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Int32 in
                guard Glibc.bind(fd, pointer, length) == 0 else { return -1 }
                return getsockname(fd, pointer, &length)
            }
        }
        guard rc == 0 else { throw HTTPTestError(description: "bind: \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }
}
