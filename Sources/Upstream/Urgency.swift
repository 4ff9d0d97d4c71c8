import Synchronization

/// Where a job stands in every queue it waits in (the upstream queue, the resize lane): the
/// highest priority of its waiters, which only rises, and how many of its waiters are on a
/// screen now (a batch's focused items, `POST /batches/<id>/focus`). A job one of them shows
/// goes before every job none of them shows, whatever the priorities; among those, priority
/// decides. Shared by a flight's jobs and read at each queue decision, so a focus that
/// changes while a job waits moves it at once.
public final class Urgency: Sendable {
    private struct State {
        var priority: Priority
        var focused = 0
    }

    private let state: Mutex<State>

    public init(_ priority: Priority) {
        state = Mutex(State(priority: priority))
    }

    public var priority: Priority { state.withLock { $0.priority } }

    /// A waiter with a higher priority joined; never lowers it.
    public func raise(to priority: Priority) {
        state.withLock { $0.priority = max($0.priority, priority) }
    }

    /// One more waiter shows this job on screen.
    public func focus() {
        state.withLock { $0.focused += 1 }
    }

    /// A waiter that showed it no longer does (scrolled away, finished, cancelled).
    public func unfocus() {
        state.withLock { $0.focused = max(0, $0.focused - 1) }
    }

    public var isFocused: Bool { state.withLock { $0.focused > 0 } }

    /// Queue order, higher first: every focused job above every other, then by priority.
    public var rank: Int {
        state.withLock { state in state.priority.rawValue + (state.focused > 0 ? Priority.allCases.count : 0) }
    }
}
