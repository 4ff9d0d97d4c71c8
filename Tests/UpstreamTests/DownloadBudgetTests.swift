import Foundation
import Synchronization
import Testing
import Support
import ThumbdTesting
@testable import Upstream

@Suite("DownloadBudget: the memory downloaded bodies hold, until freed")
struct DownloadBudgetTests {
    /// Keeps each body it is given (as a slow holder would: a queue, a client), or only its size.
    final class Holder: Sendable {
        let kept = Mutex<[String: Bytes]>([:])
        let sizes = Mutex<[String: Int]>([:])
        let failures = Mutex<[String: UpstreamError]>([:])
        let keeping = Atomic<Bool>(true)

        func record(_ name: String) -> @Sendable (FetchJob, Result<UpstreamResponse, UpstreamError>) -> Void {
            { [self] _, result in
                switch result {
                case .success(let response):
                    sizes.withLock { $0[name] = response.body.count }
                    if keeping.load(ordering: .acquiring) { kept.withLock { $0[name] = response.body } }
                case .failure(let error):
                    failures.withLock { $0[name] = error }
                }
            }
        }

        var done: Int { sizes.withLock { $0.count } + failures.withLock { $0.count } }

        /// Lets go of every body kept, and keeps none from now on.
        func letGo() {
            keeping.store(false, ordering: .releasing)
            kept.withLock { $0.removeAll() }
        }
    }

    static func configuration(limit: Int, maxObjectBytes: Int) -> TransferLoop.Configuration {
        var configuration = TransferLoopsTests.configuration()
        configuration.maxBufferedBytes = limit
        configuration.maxObjectBytes = maxObjectBytes
        return configuration
    }

    @Test("bodies held past the budget pause the next downloads, which go on when they are freed; none fails")
    func pausesUntilFreed() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let size = 600_000
        for index in 0..<6 {
            try await origin.put("b\(index).bin", (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ index) })
        }
        let limit = 1 << 20, maxObjectBytes = 2 << 20
        let loops = TransferLoops(configuration: Self.configuration(limit: limit, maxObjectBytes: maxObjectBytes), threads: 2)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        for index in 0..<6 {
            #expect(loops.submit(FetchJob(url: origin.url("/file/b\(index).bin"), host: "127.0.0.1", priority: .normal,
                                          onComplete: holder.record("b\(index)"))))
        }
        // One body fits the limit, a second goes past it (the one that may); the other four
        // wait, paused, as long as those two are held.
        #expect(try await eventually { holder.done == 2 && loops.budget.usage.paused == 4 })
        try await Task.sleep(for: .milliseconds(300))
        #expect(holder.done == 2)
        #expect(loops.budget.usage.held == 2 * size)
        holder.letGo()
        #expect(try await eventually { holder.done == 6 })
        #expect(holder.failures.withLock { $0.isEmpty })
        #expect(holder.sizes.withLock { $0.values.allSatisfy { $0 == size } })
        #expect(loops.budget.usage.peak <= limit + limit / 8 + maxObjectBytes)
        #expect(try await eventually { loops.budget.usage == DownloadBudget.Usage(held: 0, peak: loops.budget.usage.peak, paused: 0) })
    }

    @Test("bodies without a Content-Length are charged as their buffer grows, and all finish under a small budget")
    func chunkedUnderPressure() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let limit = 1 << 20, maxObjectBytes = 2 << 20
        let loops = TransferLoops(configuration: Self.configuration(limit: limit, maxObjectBytes: maxObjectBytes), threads: 2)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        holder.letGo()  // bodies are freed as they arrive
        for index in 0..<8 {
            #expect(loops.submit(FetchJob(url: origin.url("/big-chunked?size=700000&n=\(index)"), host: "127.0.0.1",
                                          priority: .normal, onComplete: holder.record("c\(index)"))))
        }
        #expect(try await eventually { holder.done == 8 })
        #expect(holder.failures.withLock { $0.isEmpty })
        #expect(holder.sizes.withLock { $0.values.allSatisfy { $0 == 700_000 } })
        #expect(loops.budget.usage.peak <= limit + limit / 8 + maxObjectBytes)
        #expect(try await eventually { loops.budget.usage.held == 0 })
    }

    @Test("a failed download gives its memory back")
    func failureGivesBack() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loops = TransferLoops(configuration: Self.configuration(limit: 1 << 20, maxObjectBytes: 2 << 20), threads: 1)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        #expect(loops.submit(FetchJob(url: origin.url("/truncated"), host: "127.0.0.1", priority: .normal,
                                      onComplete: holder.record("t"))))
        #expect(try await eventually { holder.done == 1 })
        #expect(holder.failures.withLock { $0["t"] } != nil)
        #expect(loops.budget.usage.held == 0)
        #expect(loops.budget.usage.peak == 10_000)  // its Content-Length was charged at its first byte
    }

    @Test("a download that runs out of time while paused for memory says so, not that the origin was slow")
    func timeoutWhilePaused() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        for index in 0..<3 {
            try await origin.put("t\(index).bin", [UInt8](repeating: UInt8(index), count: 600_000))
        }
        var configuration = Self.configuration(limit: 1 << 20, maxObjectBytes: 2 << 20)
        configuration.timeoutMilliseconds = 1_500
        let loops = TransferLoops(configuration: configuration, threads: 1)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        for index in 0..<2 {
            #expect(loops.submit(FetchJob(url: origin.url("/file/t\(index).bin"), host: "127.0.0.1", priority: .normal,
                                          onComplete: holder.record("t\(index)"))))
        }
        #expect(try await eventually { holder.done == 2 })  // both held: the budget and its one overdraft
        #expect(loops.submit(FetchJob(url: origin.url("/file/t2.bin"), host: "127.0.0.1", priority: .normal,
                                      onComplete: holder.record("t2"))))
        #expect(try await eventually { holder.done == 3 })
        #expect(holder.failures.withLock { $0["t2"] } == .waitedForMemory)
        holder.letGo()
        #expect(try await eventually { loops.budget.usage.held == 0 && loops.budget.usage.paused == 0 })
    }

    @Test("a small body does not wait behind large ones holding the budget: it takes from the reserve")
    func smallBodiesGoOn() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        for index in 0..<3 {
            try await origin.put("l\(index).bin", [UInt8](repeating: UInt8(index), count: 600_000))
        }
        try await origin.put("small.bin", [UInt8](repeating: 9, count: 20_000))
        let loops = TransferLoops(configuration: Self.configuration(limit: 1 << 20, maxObjectBytes: 2 << 20), threads: 1)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        for index in 0..<3 {
            #expect(loops.submit(FetchJob(url: origin.url("/file/l\(index).bin"), host: "127.0.0.1", priority: .normal,
                                          onComplete: holder.record("l\(index)"))))
        }
        // Two large bodies held (the budget and its one overdraft), the third paused.
        #expect(try await eventually { holder.done == 2 && loops.budget.usage.paused == 1 })
        #expect(loops.submit(FetchJob(url: origin.url("/file/small.bin"), host: "127.0.0.1", priority: .normal,
                                      onComplete: holder.record("small"))))
        #expect(try await eventually { holder.sizes.withLock { $0["small"] } == 20_000 })
        #expect(holder.done == 3)  // the large one still waits
        #expect(loops.budget.usage.paused == 1)
        holder.letGo()
        #expect(try await eventually { holder.done == 4 })
        #expect(try await eventually { loops.budget.usage.held == 0 })
    }

    @Test("a download cancelled while paused for memory ends at once and holds nothing")
    func cancelWhilePaused() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        for index in 0..<3 {
            try await origin.put("c\(index).bin", [UInt8](repeating: UInt8(index), count: 600_000))
        }
        let loops = TransferLoops(configuration: Self.configuration(limit: 1 << 20, maxObjectBytes: 2 << 20), threads: 1)
        loops.start()
        defer { loops.shutdown() }
        let holder = Holder()
        var jobs: [FetchJob] = []
        for index in 0..<3 {
            let job = FetchJob(url: origin.url("/file/c\(index).bin"), host: "127.0.0.1", priority: .normal,
                               onComplete: holder.record("c\(index)"))
            jobs.append(job)
            #expect(loops.submit(job))
        }
        #expect(try await eventually { holder.done == 2 && loops.budget.usage.paused == 1 })
        let paused = try #require(jobs.first { job in holder.sizes.withLock { sizes in !sizes.keys.contains { job.url.hasSuffix("/\($0).bin") } } })
        loops.cancel(paused)
        #expect(try await eventually { holder.done == 3 })
        #expect(holder.failures.withLock { $0.values.first } == .cancelled)
        #expect(loops.budget.usage.paused == 0)
        #expect(loops.budget.usage.held == 2 * 600_000)  // the two held bodies only
        holder.letGo()
        #expect(try await eventually { loops.budget.usage.held == 0 })
    }
}
