import Logging
import Synchronization

/// Several transfer loops, each a thread with its own curl multi handle, presented as one:
/// a new job goes to the loop with the fewest jobs outstanding.
///
/// One loop is one thread: every request sent and every answer read for every transfer
/// passes through it. When a grid's hundred answers land together, the last one waits
/// for the ninety-nine before it on that thread (scripts/bench's fan-out: with one loop,
/// a fetch spent 0.4 ms on average, and 0.9 ms for the slowest tenth, between its
/// request being handled and curl taking it). Two loops halve that queue.
///
/// The configured limits stay the totals: each loop gets an equal share of
/// `maxConcurrent`, `maxPerHost`, `maxConnectionsPerHost` and `maxQueued`, so that all
/// loops together never exceed them; a limit smaller than the number of loops reduces the
/// loops to it (with `maxConcurrent` 1 there is one loop and one strict priority order).
/// What sharing costs: each loop keeps its own connections (an HTTP/2 origin gets one per
/// loop, not one in all), and priority orders each loop's queue, not all of them at once.
///
/// The memory downloaded bodies hold is one budget for all loops (`maxBufferedBytes`), not
/// shared out: a loop busy with large bodies may use what an idle one does not.
public final class TransferLoops: Sendable {
    private let loops: [TransferLoop]
    public let budget: DownloadBudget

    public init(configuration: TransferLoop.Configuration, threads: Int,
                logger: Logger = Logger(label: "thumbd.fetch")) {
        let budget = DownloadBudget(limit: configuration.maxBufferedBytes)
        self.budget = budget
        loops = Self.shares(of: configuration, loops: threads).map {
            TransferLoop(configuration: $0, budget: budget, logger: logger)
        }
    }

    /// New limits and transfer settings while running (a reload), shared out over the loops
    /// that run. False, and nothing changed, when a limit is now smaller than the number of
    /// loops (each needs at least one of each): that takes a restart.
    public func apply(_ configuration: TransferLoop.Configuration) -> Bool {
        let shares = Self.shares(of: configuration, loops: loops.count)
        guard shares.count == loops.count else { return false }
        budget.setLimit(configuration.maxBufferedBytes)
        for (loop, share) in zip(loops, shares) { loop.apply(share) }
        return true
    }

    /// The loops actually running (at most `threads`; fewer when a limit is smaller).
    public var count: Int { loops.count }

    /// `configuration` split over at most `loops` loops: every limit's shares add up to it.
    static func shares(of configuration: TransferLoop.Configuration, loops wanted: Int) -> [TransferLoop.Configuration] {
        let limits = [configuration.maxConcurrent, configuration.maxConnectionsPerHost, configuration.maxPerHost,
                      configuration.maxQueued].filter { $0 > 0 }  // 0: no cap (maxPerHost) or no queue
        let count = max(1, min(wanted, limits.min() ?? wanted))
        func share(_ total: Int, _ index: Int) -> Int { total / count + (index < total % count ? 1 : 0) }
        return (0..<count).map { index in
            var loop = configuration
            loop.maxConcurrent = share(configuration.maxConcurrent, index)
            loop.maxPerHost = share(configuration.maxPerHost, index)
            loop.maxConnectionsPerHost = share(configuration.maxConnectionsPerHost, index)
            loop.maxQueued = share(configuration.maxQueued, index)
            return loop
        }
    }

    /// Queues `job` on the least busy loop. Returns false (and does not queue it) when that
    /// loop's queue is full: then every loop's is.
    public func submit(_ job: FetchJob) -> Bool {
        var chosen = 0
        if loops.count > 1 {
            var fewest = Int.max
            for (index, loop) in loops.enumerated() {
                let outstanding = loop.outstandingJobs
                if outstanding < fewest { (chosen, fewest) = (index, outstanding) }
            }
        }
        job.loopIndex.store(chosen, ordering: .releasing)
        return loops[chosen].submit(job)
    }

    /// Stops `job` if it is queued or running; it then completes with `.cancelled`.
    public func cancel(_ job: FetchJob) {
        let index = job.loopIndex.load(ordering: .acquiring)
        if loops.indices.contains(index) { loops[index].cancel(job) }
    }

    /// Transfers running and waiting for a slot, all loops together (for metrics).
    public var load: TransferLoop.Load {
        loops.reduce(into: TransferLoop.Load(running: 0, queued: 0)) { total, loop in
            let load = loop.load
            total.running += load.running
            total.queued += load.queued
        }
    }

    /// Each loop's own load (tests).
    var loads: [TransferLoop.Load] { loops.map(\.load) }

    /// Aborts everything still queued or running (each job completes with `shuttingDown`)
    /// and waits for every loop thread to exit.
    public func shutdown() {
        for loop in loops { loop.shutdown() }
    }

    /// Starts every loop's thread (jobs submitted before wait until then); once.
    public func start() {
        for loop in loops { loop.start() }
    }
}
