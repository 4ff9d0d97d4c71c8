import Foundation
import Support
import Synchronization
import Testing
@testable import Thumbnailer

/// Thumbnails made in many threads at once, as the lane's workers and the streams make them.
extension ThumbnailerTests {
    /// Each resize builds (and compiles) libvips's reduce programs and frees them when its
    /// images go: liborc 0.4.33 frees them without a lock, and a free beside a compile in
    /// another thread corrupted its list of code chunks, a crash of the whole process. So the
    /// stress runs in a child process of its own (an exit test): a crash fails this test, not
    /// the run, and its eight busy threads share no lock with the other suites' daemons.
    /// Without `VipsImageHandle`'s lock the child crashed in 1 run of 4 (and the same loop in
    /// the test process itself crashed it in 2 of 5: SIGSEGV in liborc, where the daemon had
    /// crashed); with it, none did. A race: this catches its return often, not always.
    @Test("thumbnails in 8 threads at once, over and over, with ever different sizes: none fails, nothing crashes")
    func manyThreads() async {
        await #expect(processExitsWith: .success) {
            let thumbnailer = try! Thumbnailer()
            let bodies = [(120, 80), (200, 150), (160, 160)].map { try! thumbnailer.testImage(width: $0.0, height: $0.1) }
            let failures = Atomic<Int>(0)
            let done = DispatchSemaphore(value: 0)
            let threads = 8
            for thread in 0..<threads {
                Thread.detachNewThread {
                    for round in 0..<1000 {
                        let body = bodies[(thread + round) % bodies.count]
                        let side = 10 + (round * 7 + thread * 3) % 60  // distinct reduce programs
                        do {
                            _ = try thumbnailer.thumbnail(of: body, ThumbnailSpec(width: side, height: side, format: .jpeg, quality: 80))
                        } catch {
                            failures.add(1, ordering: .relaxed)
                        }
                    }
                    done.signal()
                }
            }
            for _ in 0..<threads { done.wait() }
            if failures.load(ordering: .relaxed) != 0 { exit(1) }
        }
    }
}
