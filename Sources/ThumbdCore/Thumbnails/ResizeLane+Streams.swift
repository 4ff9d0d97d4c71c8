import Dispatch
import Foundation
import Support
import Synchronization

/// Streamed decodes (`StreamedDecode`) as lane tasks: one memory budget for every decode.
///
/// A stream is admitted against `thumbnails.maxMemoryBytes` with the resizes (its estimate
/// holds that memory until it returns, and a resize waits for it as for another resize),
/// and runs on one of the lane's stream workers, made once at start, one per stream slot
/// (`thumbnails.streams` and the slots beyond them). A stream worker parks in libvips's read
/// while the stream waits for bytes; it runs at the daemon's priority, not the resize
/// workers' nice 10, since a batch's screen is the user's own (never a foreign page's).
extension ResizeLane {
    /// What a stream worker runs: the decode, and the memory it holds.
    final class StreamJob: Sendable {
        let cost: Int
        let body: @Sendable () -> Void

        init(cost: Int, body: @escaping @Sendable () -> Void) {
            self.cost = cost
            self.body = body
        }
    }

    func startStreamWorkers() {
        for (index, worker) in streamWorkers.enumerated() {
            let thread = Thread { [self] in
                ThreadName.set("thumbd-stream")
                while case .stream(let job) = worker.next() { runStream(job, on: index) }
                worker.exited.signal()
            }
            thread.name = "thumbd-stream"
            thread.start()
        }
    }

    /// Runs `body` on a stream worker if its estimate fits the budget now (or nothing else
    /// runs). False: no worker is free, the memory is taken, or the lane has stopped; the
    /// caller lets the lane make the thumbnail from the whole body instead.
    func startStream(cost: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        let worker = state.withLock { state -> Int? in
            guard !state.stopped, !state.idleStreamWorkers.isEmpty else { return nil }
            let alone = state.running + state.streamsRunning == 0
            guard alone || state.memoryInUse + cost <= configuration.maxMemoryBytes else { return nil }
            state.streamsRunning += 1
            state.memoryInUse += cost
            return state.idleStreamWorkers.removeLast()
        }
        guard let worker else { return false }
        streamWorkers[worker].deliver(.stream(StreamJob(cost: cost, body: body)))
        return true
    }

    private func runStream(_ job: StreamJob, on worker: Int) {
        job.body()
        state.withLock { state in
            state.streamsRunning -= 1
            state.memoryInUse -= job.cost
            state.idleStreamWorkers.append(worker)
        }
        pump()  // the memory it held may let a waiting resize start
    }
}
