import Foundation
import Glibc

/// A bare listening socket on 127.0.0.1 that never accepts: the kernel completes any TCP
/// handshake into its backlog, so `pendingConnections` shows whether anybody connected at
/// all, before sending a single byte.
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

    fileprivate static func bind(_ fd: Int32, port: UInt16 = 0) throws -> UInt16 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
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

/// A 127.0.0.1 port with nobody listening, held so for as long as this lives: a socket bound
/// to it that never listens. A connect to it is refused, and no other test's listener can take
/// the port meanwhile; a port only free a moment ago was taken by another test's listener
/// while a test counted on it refusing.
package final class ClosedPort: @unchecked Sendable {  // immutable after init
    package let port: UInt16
    private let fd: Int32

    /// An ephemeral port, or `port` (a listener's that just closed: bound with SO_REUSEADDR,
    /// which its connections in TIME_WAIT need).
    package init(_ port: UInt16 = 0) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        do { self.port = try Listener.bind(fd, port: port) } catch {
            close(fd)
            throw error
        }
    }

    deinit { close(fd) }
}
