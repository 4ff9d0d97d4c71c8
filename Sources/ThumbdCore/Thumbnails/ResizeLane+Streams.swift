import Dispatch
import Foundation
import Support
import Synchronization

/// Streamed decodes (`StreamedDecode`) as lane tasks: one memory budget for every decode.
///
/// A stream is admitted against `thumbnails.maxMemoryBytes` with the resizes (its estimate
/// holds that memory until it returns, and a resize waits for it as for another resize),
/// and runs on one of the lane's stream workers, one per stream slot (`thumbnails.streams`
/// and the slots beyond them), each made when first needed and then kept. A stream worker parks in libvips's read
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

    private func startStreamThread(_ index: Int) {
        let worker = streamWorkers[index]
        let thread = Thread { [self] in
            ThreadName.set("thumbd-stream")
            while case .stream(let job) = worker.next() { runStream(job, on: index) }
            worker.exited.signal()
        }
        thread.name = "thumbd-stream"
        thread.start()
    }

    /// Runs `body` on a stream worker if its estimate fits the budget now (or nothing else
    /// runs). False: no worker is free, the memory is taken, or the lane has stopped; the
    /// caller lets the lane make the thumbnail from the whole body instead.
    func startStream(cost: Int, _ body: @escaping @Sendable () -> Void) -> Bool {
        let taken = state.withLock { state -> (worker: Int, new: Bool)? in
            guard !state.stopped, !state.idleStreamWorkers.isEmpty || state.streamThreads < streamWorkers.count else { return nil }
            let alone = state.running + state.streamsRunning == 0
            guard alone || state.memoryInUse + cost <= configuration.maxMemoryBytes else { return nil }
            state.streamsRunning += 1
            state.memoryInUse += cost
            state.notePeak()
            if let idle = state.idleStreamWorkers.popLast() { return (idle, false) }
            state.streamThreads += 1
            return (state.streamThreads - 1, true)
        }
        guard let taken else { return false }
        if taken.new { startStreamThread(taken.worker) }
        streamWorkers[taken.worker].deliver(.stream(StreamJob(cost: cost, body: body)))
        return true
    }

    /// A running stream's memory beyond its estimate, as it changes: the bytes its feed
    /// holds and the decode has not read yet (a copy of the body outside the download
    /// budget), counted in the same budget as everything the lane runs.
    func chargeStream(_ delta: Int) {
        guard delta != 0 else { return }
        state.withLock { state in
            state.memoryInUse += delta
            state.charged += delta
        }
        if delta < 0 { pump() }  // room for a waiting resize
    }

    private func runStream(_ job: StreamJob, on worker: Int) {
        job.body()
        let wake = state.withLock { state in
            state.streamsRunning -= 1
            state.memoryInUse -= job.cost
            state.idleStreamWorkers.append(worker)
            return state.idleWaiters()
        }
        for semaphore in wake { semaphore.signal() }
        pump()  // the memory it held may let a waiting resize start
    }
}
