import Glibc
import Support
import Testing

/// Memory freed inside a heap (below a block still in use, so that glibc cannot simply
/// shrink the heap) stays resident until it is returned. Residency is read with `mincore`
/// on the freed range itself, so other tests allocating at the same time do not blur it.
@Suite("FreeMemory: what the allocator keeps free goes back to the system", .serialized)
struct FreeMemoryTests {
    /// 2048 blocks of 16 KiB (under the mmap threshold: they come from a heap), written,
    /// then freed but for the highest one, which keeps the heap from shrinking under them.
    private final class Hole {
        private let freed: [UInt]
        private let guardBlock: UnsafeMutableRawPointer
        private static let size = 16 * 1024

        init() {
            var blocks = (0..<2048).map { _ in malloc(Self.size)! }
            for block in blocks { memset(block, 1, Self.size) }
            blocks.sort { UInt(bitPattern: $0) < UInt(bitPattern: $1) }
            guardBlock = blocks.removeLast()
            freed = blocks.map { UInt(bitPattern: $0) }
            for block in blocks { free(block) }
        }

        deinit { free(guardBlock) }

        /// A hole whose pages are still resident. Another daemon in this test process
        /// (each trims every 10 s) may release one between its making and its first
        /// reading; then another is made, a few times at most.
        static func resident() -> Hole {
            var hole = Hole()
            var made = 1
            while made < 5, hole.resident <= 0.9 {
                hole = Hole()
                made += 1
            }
            return hole
        }

        /// The share of the freed blocks' whole pages that are resident.
        var resident: Double {
            let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
            var pages = 0
            var resident = 0
            var vector = [UInt8](repeating: 0, count: Self.size / Int(page))
            for block in freed {
                let first = (block + page - 1) / page * page
                let count = Int((block + UInt(Self.size)) / page * page - first) / Int(page)
                let rc = vector.withUnsafeMutableBufferPointer {
                    mincore(UnsafeMutableRawPointer(bitPattern: first), Int(page) * count, $0.baseAddress)
                }
                pages += count
                // ENOMEM: the range is no longer mapped at all (glibc deleted a thread
                // arena's heap that held only freed blocks): returned, none resident.
                if rc != 0, errno == ENOMEM { continue }
                precondition(rc == 0, "mincore: \(errno)")
                resident += vector.prefix(count).filter { $0 & 1 == 1 }.count
            }
            return Double(resident) / Double(pages)
        }
    }

    @Test("returnNow releases the pages of memory freed inside a heap")
    func returnNow() {
        // Other tests running meanwhile may share this thread's heap and take some of the
        // freed blocks again between the return and the reading (they are then resident
        // again, rightly): a few tries, each with a new hole. A returnNow that returns
        // nothing fails every one.
        // Likewise another daemon's trim may return a hole before this test does: such a try
        // proves nothing and is made again.
        var tries: [(before: Double, after: Double)] = []
        for _ in 0..<8 {
            let hole = Hole.resident()
            let before = hole.resident
            FreeMemory.returnNow()
            tries.append((before, hole.resident))
            if before > 0.9, tries.last!.after < 0.1 { break }
        }
        #expect(tries.contains { $0.before > 0.9 && $0.after < 0.1 }, "resident before and after each return: \(tries)")
    }

    @Test("the timer returns it without being asked")
    func timer() async throws {
        // As above: another daemon's trim may empty a hole before the timer does, so a few
        // tries. A try counts only if its hole was resident when the timer started, the
        // timer has run since, and the hole is gone; a timer that never fires fails them all.
        var tries: [(before: Double, after: Double, runs: Int)] = []
        for _ in 0..<8 {
            let hole = Hole.resident()
            let before = hole.resident
            let freeMemory = FreeMemory(every: .milliseconds(50))
            freeMemory.start()
            let deadline = ContinuousClock.now + .seconds(3)
            while hole.resident >= 0.1 || freeMemory.timesRun == 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            freeMemory.stop()
            tries.append((before, hole.resident, freeMemory.timesRun))
            if before > 0.9, tries.last!.after < 0.1, tries.last!.runs > 0 { break }
        }
        #expect(tries.contains { $0.before > 0.9 && $0.after < 0.1 && $0.runs > 0 },
                "resident before, after, and the timer's runs in each try: \(tries)")
    }
}
