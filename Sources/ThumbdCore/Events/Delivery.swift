import Foundation
import Support
import Synchronization

/// Takes events to their subscribers, and is the one writer of every suspended event
/// stream's socket: only its lanes (threads of its own, one per core) wake a subscriber, and
/// a woken subscriber writes its socket on the lane's thread while libmicrohttpd has the
/// connection suspended (`RequestContext+Stream`); while it is not suspended, libmicrohttpd's own thread
/// for the connection does. Whoever produced an event (the transfer loop, the processing
/// stage, the resize lane, the keepalive timer, the socket watcher, the shutdown) hands the
/// subscribers here and never writes a socket itself, so none of them stalls on a client.
///
/// A subscriber is queued at most once: a second event before its turn adds nothing (it
/// reads every new event when its turn comes), so an item's `progress` and `done` a moment
/// apart cost most subscribers one write. Lanes take from one queue, a few at a time, so a
/// lane that the kernel runs late leaves its share to the others; two lanes never write one
/// socket at once (the lock of the stream's `RequestContext`).
final class Delivery: Sendable {
    private struct State {
        var queue: [EventSubscriber] = []
        var stopping = false
    }

    private let state = Mutex(State())
    private let work = DispatchSemaphore(value: 0)
    private let exited = DispatchGroup()
    private let lanes: Int
    private let stopped = Atomic<Bool>(false)

    private let started = Atomic<Bool>(false)

    /// `lanes` threads, started by `start()`; `stop()` ends them.
    init(lanes: Int = max(1, ProcessInfo.processInfo.activeProcessorCount)) {
        self.lanes = lanes
    }

    /// Starts the lanes' threads; once, and not after `stop()`. What is woken before waits
    /// for them.
    func start() {
        guard !state.withLock({ $0.stopping }), !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for lane in 0..<lanes {
            exited.enter()
            let thread = Thread { [self] in
                ThreadName.set("thumbd-deliver")
                Self.isLane = true
                run()
                exited.leave()
            }
            thread.name = "thumbd-deliver-\(lane)"
            thread.start()
        }
    }

    /// Whether the calling thread is a delivery lane.
    private static var isLane: Bool {
        get { Thread.current.threadDictionary["thumbd.delivery.lane"] != nil }
        set { Thread.current.threadDictionary["thumbd.delivery.lane"] = newValue ? true : nil }
    }

    /// Traps (in debug builds) unless the calling thread is a lane, or the lanes have
    /// stopped: where a subscriber is about to write its socket.
    func assertIsWriter() {
        assert(stopped.load(ordering: .acquiring) || Self.isLane, "an event stream's socket is written by a delivery lane only")
    }

    /// New events for these subscribers (or, with `keepalive`, a keepalive is due).
    func wake(_ subscribers: [EventSubscriber], keepalive: Bool = false) {
        if keepalive { for subscriber in subscribers { subscriber.requestKeepalive() } }
        let added = state.withLock { state -> Int in
            guard !state.stopping else { return -1 }
            let before = state.queue.count
            for subscriber in subscribers where subscriber.markQueued() { state.queue.append(subscriber) }
            return state.queue.count - before
        }
        if added < 0 {  // stopped after the server: no socket is left to write; let them see their end
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
        stopped.store(true, ordering: .releasing)
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
