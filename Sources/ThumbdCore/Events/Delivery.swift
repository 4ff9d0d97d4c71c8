import Foundation
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
    static let shared = Delivery(lanes: max(1, ProcessInfo.processInfo.activeProcessorCount))

    /// Up to this many subscribers are woken on the caller's thread.
    static let inlineLimit = 16

    private let queue = Mutex<[EventSubscriber]>([])
    private let work = DispatchSemaphore(value: 0)
    private let lanes: Int

    private init(lanes: Int) {
        self.lanes = lanes
        for lane in 0..<lanes {
            let thread = Thread { [self] in
                ThreadName.set("thumbd-deliver")
                run()
            }
            thread.name = "thumbd-deliver-\(lane)"
            thread.start()
        }
    }

    /// Starts the lanes (once per process; they are shared, like a thread pool).
    static func start() { _ = shared }

    /// New events for these subscribers (or, with `keepalive`, a keepalive is due).
    static func wake(_ subscribers: [EventSubscriber], keepalive: Bool = false) {
        if keepalive { for subscriber in subscribers { subscriber.requestKeepalive() } }
        guard subscribers.count > inlineLimit else {
            for subscriber in subscribers { subscriber.wake() }
            return
        }
        shared.enqueue(subscribers)
    }

    private func enqueue(_ subscribers: [EventSubscriber]) {
        let added = queue.withLock { queue -> Int in
            let before = queue.count
            for subscriber in subscribers where subscriber.markQueued() { queue.append(subscriber) }
            return queue.count - before
        }
        for _ in 0..<min(added, lanes) { work.signal() }
    }

    private func run() {
        var batch: [EventSubscriber] = []
        while true {
            // Take a few at a time: one lock round per subscriber would be most of the cost.
            queue.withLock { queue in
                let count = min(queue.count, max(1, queue.count / lanes / 4), 32)
                batch.append(contentsOf: queue.prefix(count))
                queue.removeFirst(count)
            }
            if batch.isEmpty {
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
