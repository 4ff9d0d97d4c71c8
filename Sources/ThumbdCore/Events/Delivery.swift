import Foundation
import Support
import Synchronization

/// Takes events to their subscribers. Waking a subscriber writes to its socket (see
/// `StreamBox`), so an event for a thousand subscribers is a thousand `send`s: they are made
/// by a few delivery lanes, one per core, not by the thread that produced the event (often
/// the transfer loop, which must not stall).
///
/// A subscriber is queued at most once: a second event before its turn adds nothing (it
/// reads every new event when its turn comes), so an item's `progress` and `done` a moment
/// apart cost most subscribers one write, and lanes never queue up behind each other on the
/// same stream. A few subscribers are woken in place, which saves the hand-over.
final class Delivery: Sendable {
    /// Up to this many subscribers are woken on the caller's thread.
    static let inlineLimit = 16

    private struct State {
        var queue: [EventSubscriber] = []
        var stopping = false
    }

    private let state = Mutex(State())
    private let work = DispatchSemaphore(value: 0)
    private let exited = DispatchGroup()
    private let lanes: Int

    /// Starts `lanes` threads; `stop()` ends them.
    init(lanes: Int = max(1, ProcessInfo.processInfo.activeProcessorCount)) {
        self.lanes = lanes
        for lane in 0..<lanes {
            exited.enter()
            let thread = Thread { [self] in
                ThreadName.set("thumbd-deliver")
                run()
                exited.leave()
            }
            thread.name = "thumbd-deliver-\(lane)"
            thread.start()
        }
    }

    /// New events for these subscribers (or, with `keepalive`, a keepalive is due).
    func wake(_ subscribers: [EventSubscriber], keepalive: Bool = false) {
        if keepalive { for subscriber in subscribers { subscriber.requestKeepalive() } }
        guard subscribers.count > Self.inlineLimit else {
            for subscriber in subscribers { subscriber.wake() }
            return
        }
        let added = state.withLock { state -> Int in
            guard !state.stopping else { return -1 }
            let before = state.queue.count
            for subscriber in subscribers where subscriber.markQueued() { state.queue.append(subscriber) }
            return state.queue.count - before
        }
        if added < 0 {  // stopped: the caller's thread does the writes
            for subscriber in subscribers { subscriber.wake() }
            return
        }
        for _ in 0..<min(added, lanes) { work.signal() }
    }

    /// Lets the lanes finish what is queued, then ends them and waits for their exit.
    func stop() {
        let first = state.withLock { state in
            defer { state.stopping = true }
            return !state.stopping
        }
        guard first else { return }
        for _ in 0..<lanes { work.signal() }
        exited.wait()
    }

    private func run() {
        var batch: [EventSubscriber] = []
        while true {
            // Take a few at a time: one lock round per subscriber would be most of the cost.
            let stopping = state.withLock { state in
                let count = min(state.queue.count, max(1, state.queue.count / lanes / 4), 32)
                batch.append(contentsOf: state.queue.prefix(count))
                state.queue.removeFirst(count)
                return state.stopping
            }
            if batch.isEmpty {
                if stopping { return }
                work.wait()
                continue
            }
            for subscriber in batch {
                subscriber.unmarkQueued()  // before the wake: an event during it queues it again
                subscriber.wake()
            }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
