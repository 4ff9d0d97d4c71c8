import CMalloc
import Dispatch
import Synchronization

/// Gives the memory the allocator holds free back to the system, every `interval`.
///
/// glibc's malloc keeps what a burst freed (an arena per thread, up to 8 per core, each
/// with its own free lists) and returns only the free space at the top of each heap. A
/// daemon whose threads allocate in bursts (image bodies, thumbnails, SQLite's pages) then
/// grows by steps of several megabytes that stay after the burst, although nothing lives in
/// them: in a soak, `malloc_trim` took back 6 to 11 MB each time it was called by hand.
/// `malloc_trim(0)` releases every whole free page of every arena (`madvise`), keeping
/// the address space, so a page used again costs one page fault.
package final class FreeMemory: Sendable {
    private let interval: Duration
    /// From `start()` to `stop()`: a Dispatch source, set up once and cancelled once.
    private let timer = Mutex<(any DispatchSourceTimer)?>(nil)
    private let stopped = Atomic<Bool>(false)
    private let runs = Runs()

    private final class Runs: Sendable {
        let count = Atomic<Int>(0)
    }

    /// How many times the timer has returned the free memory so far.
    package var timesRun: Int { runs.count.load(ordering: .relaxed) }

    /// Returns free memory every `interval` once started (`start()`).
    package init(every interval: Duration) {
        self.interval = interval
    }

    /// Starts the timer, on a queue of its own: a global queue runs as many items at once as
    /// there are cores, so blocking work there (the tests' socket reads, for one) could hold
    /// the timer back for as long as it blocks. Once, and not after `stop()`.
    package func start() {
        let interval = interval
        let runs = runs
        timer.withLock { timer in
            guard timer == nil, !stopped.load(ordering: .acquiring) else { return }
            let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "thumbd.free-memory", qos: .utility))
            source.schedule(deadline: .now() + interval.dispatchInterval, repeating: interval.dispatchInterval,
                            leeway: .milliseconds(100))
            source.setEventHandler {
                Self.returnNow()
                runs.count.add(1, ordering: .relaxed)
            }
            source.resume()
            timer = source
        }
    }

    /// Returns the free memory now. Whether any was given back.
    @discardableResult
    package static func returnNow() -> Bool {
        malloc_trim(0) == 1
    }

    /// Stops the timer (a call in progress finishes).
    package func stop() {
        stopped.store(true, ordering: .releasing)
        timer.withLock { $0?.cancel() }
    }

    deinit { timer.withLock { $0?.cancel() } }
}
