import Foundation
import Synchronization
import Testing
import LoopbackClient

/// The client's socket is closed once, whatever way the connection ends.
@Suite("HTTPConnection's socket")
struct HTTPConnectionTests {
    /// A 127.0.0.1 port nobody listens on, and the socket that holds it: bound, never
    /// listening, so a connect to it is refused and no other test's listener (or connection)
    /// can take the port meanwhile. Closed by the caller. A port bound for a moment, then
    /// closed, was taken by another test's listener while this one connected 2,530 times.
    static func refusedPort() throws -> (port: UInt16, socket: Int32) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw HTTPClientError("bind: \(String(cString: strerror(errno)))")
        }
        return (UInt16(bigEndian: address.sin_port), fd)
    }

    @Test("a refused connect closes its socket once: a descriptor another thread opens meanwhile survives")
    func refusedClosesOnce() async throws {
        let (port, holder) = try Self.refusedPort()
        defer { close(holder) }
        // Closed twice, the failed connect's second close lands on whatever descriptor took
        // the number in between: here the other thread's, as in a daemon its lock file or a
        // listening socket. Each round, that thread opens a file and checks it is still open.
        let stop = Atomic<Bool>(false)
        let lost = Atomic<Int>(0)
        let rounds = Atomic<Int>(0)
        let watcher = Thread {
            while !stop.load(ordering: .relaxed) {
                let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { continue }
                for _ in 0..<50 where fcntl(fd, F_GETFD) < 0 {
                    lost.add(1, ordering: .relaxed)
                    break
                }
                if fcntl(fd, F_GETFD) >= 0 { close(fd) }
                rounds.add(1, ordering: .relaxed)
            }
        }
        watcher.start()
        defer { stop.store(true, ordering: .relaxed) }
        let deadline = ContinuousClock.now + .seconds(3)
        var refused = 0
        while ContinuousClock.now < deadline && refused < 20_000 && lost.load(ordering: .relaxed) == 0 {
            #expect(throws: HTTPClientError.self) { _ = try HTTPConnection(address: .v4(0x7F00_0001), port: port, timeoutSeconds: 1) }
            refused += 1
        }
        #expect(lost.load(ordering: .relaxed) == 0, "after \(refused) refused connects and \(rounds.load(ordering: .relaxed)) opens")
    }
}
