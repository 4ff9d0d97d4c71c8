import Foundation
import Synchronization
import Testing
import LoopbackClient
import ThumbdTesting

extension HTTPConnectionTests {
    /// A signal handled while the client waits for an answer (a profiler's, a debugger's)
    /// must not fail the read: with a receive timeout set, Linux never restarts a socket read
    /// after a handler ran, even one installed with SA_RESTART, and `recv` returns EINTR.
    @Test("an answer that comes while signals interrupt the read is read whole")
    func signalsDuringTheRead() async throws {
        let origin = try await TestOrigin()
        // A no-op handler: the signal interrupts the read and changes nothing else. Only the
        // reading thread is sent it, so the other suites' threads never see it.
        signal(SIGUSR1) { _ in }
        let shared = Shared()
        let response = try await withThrowingTaskGroup(of: HTTPConnection.Response?.self) { group in
            group.addTask {
                try await blocking {
                    // This thread may have been started with signals blocked; a blocked
                    // signal waits and interrupts nothing.
                    var usr1 = sigset_t()
                    sigemptyset(&usr1)
                    sigaddset(&usr1, SIGUSR1)
                    pthread_sigmask(SIG_UNBLOCK, &usr1, nil)
                    shared.reader.withLock { $0 = pthread_self() }
                    defer { shared.reader.withLock { $0 = nil } }
                    let connection = try HTTPConnection(address: .v4(0x7F00_0001), port: origin.port, timeoutSeconds: 20)
                    defer { connection.close() }
                    // The origin answers after 600 ms: the read waits in recv meanwhile.
                    try connection.send("GET", "/img/signals.jpg?size=4096&delay=600")
                    return try connection.read()
                }
            }
            group.addTask {
                try await blocking {
                    // Every 20 ms while the reader has not returned, for at most 5 s.
                    let deadline = ContinuousClock.now + .seconds(5)
                    var started = false
                    while ContinuousClock.now < deadline {
                        // Sent under the lock the reader clears before its thread ends: never
                        // to a thread that has gone.
                        let sent = shared.reader.withLock { thread -> Bool in
                            guard let thread else { return false }
                            return pthread_kill(thread, SIGUSR1) == 0
                        }
                        if sent {
                            started = true
                            shared.signalled.add(1, ordering: .relaxed)
                        } else if started {
                            break
                        }
                        usleep(20_000)
                    }
                    return nil
                }
            }
            var response: HTTPConnection.Response?
            for try await result in group { if let result { response = result } }
            return response
        }
        #expect(response?.status == 200)
        #expect(response?.body.count == 4096)
        // The reader waited 600 ms in recv: many signals came while it did.
        #expect(shared.signalled.load(ordering: .relaxed) >= 5)
    }

    /// What the two threads share: the reading thread while it reads, and the signals sent.
    private final class Shared: Sendable {
        let reader = Mutex<pthread_t?>(nil)
        let signalled = Atomic<Int>(0)
    }
}
