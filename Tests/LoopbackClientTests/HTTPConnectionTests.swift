import Foundation
import Synchronization
import Testing
import LoopbackClient
import ThumbdTesting

/// The client's socket is closed once, whatever way the connection ends.
@Suite("HTTPConnection's socket")
struct HTTPConnectionTests {
    @Test("a refused connect closes its socket once: a descriptor another thread opens meanwhile survives")
    func refusedClosesOnce() async throws {
        // Held, not only free a moment ago: another test's listener took such a port while
        // this one connected 2,530 times.
        let closed = try ClosedPort()
        defer { withExtendedLifetime(closed) {} }
        let port = closed.port
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
