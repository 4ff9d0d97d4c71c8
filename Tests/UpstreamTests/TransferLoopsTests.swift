import Foundation
import Synchronization
import Testing
import Support
import ThumbdTesting
@testable import Upstream

@Suite("TransferLoops: the limits shared out, jobs on the least busy loop")
struct TransferLoopsTests {
    static func configuration(maxConcurrent: Int = 256, maxPerHost: Int = 0, maxConnectionsPerHost: Int = 128,
                              maxQueued: Int = 10_000) -> TransferLoop.Configuration {
        var configuration = TransferLoop.Configuration()  // connects anywhere: the origin is on loopback
        configuration.maxConcurrent = maxConcurrent
        configuration.maxPerHost = maxPerHost
        configuration.maxConnectionsPerHost = maxConnectionsPerHost
        configuration.maxQueued = maxQueued
        // A held request must not end in a timeout on a loaded machine: when the whole suite
        // runs on two cores a test can take over 30 s, the default limit of a whole transfer.
        configuration.lowSpeedSeconds = 120
        configuration.timeoutMilliseconds = 300_000
        return configuration
    }

    static func limits(_ shares: [TransferLoop.Configuration]) -> [[Int]] {
        shares.map { [$0.maxConcurrent, $0.maxPerHost, $0.maxConnectionsPerHost, $0.maxQueued] }
    }

    @Test("every limit is split so that the shares add up to it; 0 (no cap, no queue) stays 0")
    func shares() {
        #expect(Self.limits(TransferLoops.shares(of: Self.configuration(), loops: 2))
                == [[128, 0, 64, 5000], [128, 0, 64, 5000]])
        let odd = TransferLoops.shares(of: Self.configuration(maxConcurrent: 5, maxPerHost: 3, maxQueued: 7), loops: 2)
        #expect(Self.limits(odd) == [[3, 2, 64, 4], [2, 1, 64, 3]])
        #expect(Self.limits(TransferLoops.shares(of: Self.configuration(maxQueued: 0), loops: 2))
                == [[128, 0, 64, 0], [128, 0, 64, 0]])
    }

    @Test("a limit smaller than the loops reduces them to it: no loop gets a share of 0")
    func fewerLoops() {
        #expect(TransferLoops.shares(of: Self.configuration(maxConcurrent: 1), loops: 2).count == 1)
        #expect(TransferLoops.shares(of: Self.configuration(maxConnectionsPerHost: 1), loops: 4).count == 1)
        let three = TransferLoops.shares(of: Self.configuration(maxPerHost: 3), loops: 4)
        #expect(Self.limits(three).map { $0[1] } == [1, 1, 1])
        #expect(TransferLoops.shares(of: Self.configuration(), loops: 1).count == 1)
    }

    final class Outcomes: Sendable {
        let results = Mutex<[String: Result<UpstreamResponse, UpstreamError>]>([:])
        func record(_ name: String) -> @Sendable (FetchJob, Result<UpstreamResponse, UpstreamError>) -> Void {
            { [self] _, result in results.withLock { $0[name] = result } }
        }
        var count: Int { results.withLock { $0.count } }
    }

    @Test("two loops: a host's transfers are spread over both and, together, never exceed maxPerHost")
    func perHostTotal() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loops = TransferLoops(configuration: Self.configuration(maxPerHost: 3), threads: 2)
        loops.start()
        defer { loops.shutdown() }
        #expect(loops.count == 2)
        let outcomes = Outcomes()
        for index in 0..<8 {
            let job = FetchJob(url: origin.url("/gate/shared"), host: "127.0.0.1", priority: .normal,
                               onComplete: outcomes.record("job\(index)"))
            #expect(loops.submit(job))
        }
        #expect(try await eventually { try await origin.requests("/gate/shared") == 3 })
        #expect(try await eventually { loops.loads.map(\.running) == [2, 1] && loops.load.queued == 5 })
        // With each loop's own full limit (3 each) three more would start now.
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await origin.requests("/gate/shared") == 3)
        try await origin.release("shared")
        #expect(try await eventually { outcomes.count == 8 })
        #expect(outcomes.results.withLock { $0.values.allSatisfy { (try? $0.get().status) == 200 } })
        #expect(try await origin.requests("/gate/shared") == 8)
    }

    @Test("a job is cancelled on the loop it runs on; the other loop's job goes on")
    func cancelOnItsLoop() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loops = TransferLoops(configuration: Self.configuration(), threads: 2)
        loops.start()
        let outcomes = Outcomes()
        let first = FetchJob(url: origin.url("/hang"), host: "127.0.0.1", priority: .normal, onComplete: outcomes.record("first"))
        #expect(loops.submit(first))
        #expect(try await eventually { try await origin.requests("/hang") == 1 })
        let second = FetchJob(url: origin.url("/hang"), host: "127.0.0.1", priority: .normal, onComplete: outcomes.record("second"))
        #expect(loops.submit(second))
        #expect(try await eventually { try await origin.requests("/hang") == 2 })
        #expect(first.loopIndex.load(ordering: .relaxed) != second.loopIndex.load(ordering: .relaxed))
        loops.cancel(second)
        #expect(try await eventually { outcomes.count == 1 })
        #expect(outcomes.results.withLock { $0["second"].map { if case .failure(.cancelled) = $0 { true } else { false } } } == true)
        #expect(try await eventually { try await origin.aborted("/hang") == 1 })
        #expect(try await eventually { loops.load.running == 1 })
        loops.shutdown()
        #expect(outcomes.results.withLock { $0["first"].map { if case .failure(.shuttingDown) = $0 { true } else { false } } } == true)
    }

    @Test("new limits while running: queued jobs start under them at once; a limit below the loops is refused")
    func applyWhileRunning() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loops = TransferLoops(configuration: Self.configuration(maxPerHost: 2), threads: 2)
        loops.start()
        defer { loops.shutdown() }
        let outcomes = Outcomes()
        for index in 0..<6 {
            #expect(loops.submit(FetchJob(url: origin.url("/gate/live"), host: "127.0.0.1", priority: .normal,
                                          onComplete: outcomes.record("job\(index)"))))
        }
        #expect(try await eventually { try await origin.requests("/gate/live") == 2 && loops.load.queued == 4 })
        #expect(loops.apply(Self.configuration(maxPerHost: 4)))
        #expect(try await eventually { try await origin.requests("/gate/live") == 4 && loops.load.queued == 2 })
        // One loop's share would be 0: refused, the limits in force stay.
        #expect(!loops.apply(Self.configuration(maxConcurrent: 1)))
        try await Task.sleep(for: .milliseconds(200))
        #expect(try await origin.requests("/gate/live") == 4)
        try await origin.release("live")
        #expect(try await eventually { outcomes.count == 6 })
        #expect(outcomes.results.withLock { $0.values.allSatisfy { (try? $0.get().status) == 200 } })
    }

    @Test("a smaller queue applied while running refuses new jobs past it")
    func applySmallerQueue() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loops = TransferLoops(configuration: Self.configuration(maxConcurrent: 2), threads: 2)
        loops.start()
        defer { loops.shutdown() }
        let outcomes = Outcomes()
        func submit(_ name: String) -> Bool {
            loops.submit(FetchJob(url: origin.url("/gate/queue"), host: "127.0.0.1", priority: .normal,
                                  onComplete: outcomes.record(name)))
        }
        #expect(submit("a") && submit("b") && submit("c"))
        #expect(loops.apply(Self.configuration(maxConcurrent: 2, maxQueued: 0)))
        // Each loop now takes its one running transfer and no queue: both are full.
        #expect(!submit("d"))
        try await origin.release("queue")
        #expect(try await eventually { outcomes.count == 3 })
    }
}
