import BlobStore
import Foundation
import Support
import Synchronization
import Upstream

/// What the page shows: the items on screen go first, the rest wait for them (at most
/// `batches.screenFirstMilliseconds`); with `cancelOffscreen`, what left the screen long ago is cancelled.
extension Batch {
    /// Holds `indices` back until the items on screen have finished.
    func deferUntilScreenDone(_ indices: [Int]) {
        let released = state.withLock { state -> [Int] in
            state.deferred.formUnion(indices)
            return state.releasable()
        }
        start(released)
    }

    /// Starts every deferred item now (the wait for the screen has lasted long enough).
    func releaseDeferred() {
        let released = state.withLock { state -> [Int] in
            defer { state.deferred = [] }
            return state.deferred.sorted()
        }
        start(released)
    }

    func start(_ indices: [Int]) {
        guard !indices.isEmpty, let start = startDeferred.value else { return }
        start(indices)
    }

    /// What a change of focus asks of the registry.
    struct FocusChange {
        /// Items cancelled off screen that are back on it: to start again.
        var back: [Int] = []
        /// Items that left the screen with most of their original still to come: put back
        /// among the deferred, their flights to leave (outside our lock).
        var yielded: [FlightTicket] = []
    }

    /// What the page says is on screen now (`"focus"` in the POST, `POST …/focus`): those
    /// items' jobs go to the head of their queues, the others' leave it. Returns the items
    /// cancelled off screen that are back on it, to start again (state `queued` once more),
    /// unless the batch has ended, and the flights of the items that yield.
    func focus(_ indices: Set<Int>, now: ContinuousClock.Instant = .now) -> FocusChange {
        var deferredNow: [Int] = []
        var observers: [(FetchJob, UInt64)] = []
        var cameOnScreen: [(Int, FetchJob)] = []
        let change = state.withLock { state -> FocusChange in
            var change = FocusChange()
            state.screenKnown = true
            for index in state.items.indices {
                let onScreen = indices.contains(index)
                var item = state.items[index]
                if onScreen {
                    item.leftScreen = nil
                } else if item.focused {
                    item.leftScreen = now  // it was on screen and has just left it
                    if yieldsOffscreen, !item.isTerminal, state.finishedAt == nil, let ticket = item.ticket,
                       (item.arrived ?? 0) < 0.5 {
                        change.yielded.append(ticket)
                        if let job = item.job, let observer = item.observer { observers.append((job, observer)) }
                        item.detach()
                        item.job = nil
                        item.observer = nil
                        item.requeue()
                        state.deferred.insert(index)
                    }
                }
                if onScreen, !item.focused, !item.isTerminal, let job = item.job { cameOnScreen.append((index, job)) }
                if !item.isTerminal { item.setFocused(onScreen) } else { item.focused = onScreen }
                if onScreen, item.cancelledOffscreen, state.finishedAt == nil {
                    item.cancelledOffscreen = false
                    item.requeue()
                    state.cancelled -= 1
                    change.back.append(index)
                }
                state.items[index] = item
            }
            // Deferred items now on screen start at once; the rest once the screen is done.
            let shown = state.deferred.intersection(indices)
            state.deferred.subtract(shown)
            deferredNow = shown.sorted() + state.releasable()
            return change
        }
        for (job, observer) in observers { job.stopObserving(observer) }
        // Off screen it sent no progress: on screen, its tile shows where its download stands.
        for (index, job) in cameOnScreen { showProgressSoFar(index, of: job) }
        start(deferredNow)
        return change
    }

    /// The items on screen now, in index order.
    var focused: [Int] { state.withLock { $0.items.filter(\.focused).map(\.index) } }

    /// Whether the page shows item `index` now.
    func isFocused(_ index: Int) -> Bool { state.withLock { $0.items[index].focused } }

    /// With `cancelOffscreen`: cancels the unfinished items that left the screen at least
    /// `after` ago. Returns the tickets to leave (outside our lock).
    func cancelOffscreen(after: Duration, now: ContinuousClock.Instant = .now) -> [FlightTicket] {
        guard cancelOffscreen else { return [] }
        return cancel(where: { item in item.leftScreen.map { now - $0 >= after } ?? false }, offscreen: true)
    }
}
