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
///
/// Large blocks (a downloaded body, a decoded image) never go into an arena: see
/// `largeBlockBytes`.
package final class FreeMemory: @unchecked Sendable {
    // A Dispatch source is thread-safe; it is set up once and cancelled once.
    private let timer: any DispatchSourceTimer
    private let runs = Runs()

    private final class Runs: Sendable {
        let count = Atomic<Int>(0)
    }

    /// How many times the timer has returned the free memory so far.
    package var timesRun: Int { runs.count.load(ordering: .relaxed) }

    /// Starts returning free memory every `interval`, on a queue of its own: a global queue
    /// runs as many items at once as there are cores, so blocking work there (the tests' socket
    /// reads, for one) could hold the timer back for as long as it blocks.
    package init(every interval: Duration) {
        Self.mapLargeBlocks()
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "thumbd.free-memory", qos: .utility))
        timer.schedule(deadline: .now() + interval.dispatchInterval, repeating: interval.dispatchInterval,
                       leeway: .milliseconds(100))
        self.timer = timer
        timer.setEventHandler { [runs] in
            Self.returnNow()
            runs.count.add(1, ordering: .relaxed)
        }
        timer.resume()
    }

    /// Blocks of this size or more get a mapping of their own, which `free` unmaps at once.
    ///
    /// glibc maps blocks from 128 KiB, but raises that threshold to the size of each mapped
    /// block freed (up to 32 MiB), so after the first bodies of a burst are freed the next
    /// ones come from the arenas, and their memory stays in the process until the next trim.
    /// The download budget bounds the bodies alive at once (164 MiB by default); sixty 18 MiB
    /// originals asked at once took 241–272 MB over the idle process with the moving
    /// threshold, and 162 MB with it fixed. What it costs: a mapped block's pages are new
    /// (zero-filled) each time. Fixed at glibc's 128 KiB, libvips's working buffers (a few
    /// hundred KiB) were mapped too, and a 4000×3000 thumbnail took 13% more CPU in one bench
    /// run; at 1 MiB they stay in the arenas, while the blocks that make RSS outgrow the
    /// bounds (bodies, decoded images) are mapped.
    package static let largeBlockBytes = 1 << 20

    /// Fixes glibc's mmap threshold at `largeBlockBytes` (which also stops it moving).
    package static func mapLargeBlocks() {
        _ = mallopt(M_MMAP_THRESHOLD, Int32(largeBlockBytes))
    }

    /// Whether a block of `bytes` allocated now gets a mapping of its own (then frees it).
    package static func blockIsMapped(bytes: Int) -> Bool {
        guard let block = malloc(bytes) else { return false }
        defer { free(block) }
        return thumbd_malloc_is_mapped(block) != 0
    }

    /// Returns the free memory now. Whether any was given back.
    @discardableResult
    package static func returnNow() -> Bool {
        malloc_trim(0) == 1
    }

    /// Stops the timer (a call in progress finishes).
    package func stop() { timer.cancel() }

    deinit { timer.cancel() }
}
