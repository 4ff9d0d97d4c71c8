import CVips
import Foundation
import Testing
@testable import Thumbnailer

/// libvips 8.14's workers exit after 15 s idle, and one that exits just as a pipeline hands it
/// a task loses the task (the pipeline then waits forever). thumbd replaces the wait they
/// call (`IdleWorkers`); these check that libvips reaches the replacement, and what it does.
@Suite("libvips's idle workers")
struct IdleWorkerTests {
    @Test("libvips's workers reach thumbd's idle wait: with 8.14 it has no timeout, with any other libvips it is libvips's own")
    func idleWait() throws {
        _ = try Thumbnailer()
        #expect(IdleWorkers.interposed)
        #expect(!Thumbnailer.losesIdleWorkerTasks)
        let semaphore = UnsafeMutablePointer<VipsSemaphore>.allocate(capacity: 1)
        let name = strdup("probe")  // kept by the semaphore, not copied
        vips_semaphore_init(semaphore, 0, name)
        defer {
            vips_semaphore_destroy(semaphore)
            semaphore.deallocate()
            free(name)
        }
        nonisolated(unsafe) let raised = semaphore
        let up = Thread { usleep(300_000); vips_semaphore_up(raised) }
        up.start()
        let started = ContinuousClock.now
        // A 50 ms timeout, raised after 300 ms: 8.14's own wait gives up (-1) at 50 ms.
        let result = vips_semaphore_down_timeout(semaphore, 50_000)
        let waited = ContinuousClock.now - started
        if vips_version(0) == 8 && vips_version(1) == 14 {
            #expect(result == 0 && waited >= .milliseconds(250), "\(result) after \(waited)")
        } else {
            #expect(result == -1 && waited < .milliseconds(250), "\(result) after \(waited)")
            vips_semaphore_down(semaphore)  // the raise, before the semaphore goes
        }
    }
}
