import Dispatch
import Foundation
import Synchronization

/// Where a completed transfer's bytes are turned into a cached object and answers: the
/// image check (415), freshness, the SHA-256 ETag, the store write's submission and waking
/// every waiter. None of it runs on the transfer thread, so one large image's hash never
/// delays the bytes of the others, and libvips will run here next.
///
/// A fixed set of serial queues, one per core, taken in turn: bounded concurrency without a
/// thread per job. Work is never dropped; the queue is bounded by the transfers that can
/// complete (upstream.maxQueued + maxConcurrent).
final class ProcessingStage: Sendable {
    private let workers: [DispatchQueue]
    private let next = Atomic<Int>(0)

    init(workers: Int = ProcessInfo.processInfo.activeProcessorCount) {
        self.workers = (0..<max(1, workers)).map { DispatchQueue(label: "thumbd.processing.\($0)") }
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        let index = next.add(1, ordering: .relaxed).oldValue % workers.count
        workers[index].async(execute: work)
    }

    /// Waits until everything submitted so far has run (shutdown: after the transfer loop
    /// has completed its last jobs, before the server waits for its answers).
    func drain() {
        for worker in workers { worker.sync {} }
    }
}
