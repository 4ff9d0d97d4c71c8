import BlobStore
import Dispatch
import Synchronization
import Upstream

/// What a flight runs: an upstream fetch (`FetchJob`) or a resize (`ResizeJob`).
package protocol CoalescedJob: AnyObject, Sendable {
    /// Its place in the queues it waits in: the highest priority of its waiters, and whether
    /// one of them shows it on screen.
    var urgency: Urgency { get }
}

extension CoalescedJob {
    /// A waiter with a higher priority joined.
    func raisePriority(to priority: Priority) { urgency.raise(to: priority) }
}

extension FetchJob: CoalescedJob {}

/// How a request met its flight: it started it (`miss`), joined it in flight (`coalesced`),
/// or came after it had finished, while its result was being stored (`hit`: that result is
/// what the cache holds).
package enum FlightRole: Sendable { case leader, follower, finished }

/// What every waiter of a flight gets.
package typealias FlightOutcome = Result<CachedObject, ThumbdError>

/// One upstream fetch per cache key.
package typealias FetchCoalescer = Coalescer<FetchJob>

/// At most one flight per cache key: one upstream fetch, or one resize. The first asker creates the in-flight entry
/// (`leader`: its response says `miss`); later askers join its waiting list (`follower`:
/// `coalesced`). All get the same outcome. Waiters are picked under the lock and called
/// after it is released (Varnish's two-phase rush), so a waiter can never deadlock the map.
///
/// A flight can be completed while it is kept (`complete(…, keep: true)`): its waiters are
/// answered at once, and askers arriving before `release` get the outcome without waiting
/// (`Joined.ready`). That lets the store commit happen off the clients' critical path
/// without opening a window for a second fetch. A kept object answers newcomers only while
/// it is fresh, as the stored copy would: one already expired (`max-age=0`) is replaced by a
/// new flight, whose asker leads it.
package final class Coalescer<Job: CoalescedJob>: Sendable {
    package typealias Outcome = FlightOutcome
    package typealias Role = FlightRole
    package typealias Waiter = @Sendable (Outcome, Role) -> Void

    /// Identifies one waiter, to leave the waiting list.
    package struct Ticket: Sendable, Hashable {
        package let key: String
        let token: UInt64
    }

    package struct Joined: Sendable {
        package let ticket: Ticket
        package let role: Role
        /// Set for the leader only: the job it must submit.
        package let job: Job?
        /// Set when the flight had already finished: answer with this, do not wait.
        package let ready: Outcome?
        /// The job the flight runs (for progress), unless it had finished.
        package let flight: Job?
    }

    private struct State {
        var flights: [String: FlightStateMachine<Job>] = [:]
        var nextToken: UInt64 = 0
        /// Threads in `waitUntilIdle`, woken when the last flight ends.
        var idleWaiters: [DispatchSemaphore] = []

        mutating func remove(_ key: String) {
            flights[key] = nil
            if flights.isEmpty && !idleWaiters.isEmpty {
                for waiter in idleWaiters { waiter.signal() }
                idleWaiters.removeAll()
            }
        }
    }

    private let state = Mutex(State())
    private let abortWhenAbandoned: Bool

    package init(abortWhenAbandoned: Bool) {
        self.abortWhenAbandoned = abortWhenAbandoned
    }

    /// Joins the flight for `key`, creating it with `makeJob` when none is in flight (or the
    /// one kept holds an object expired at `now`, seconds since 1970).
    package func join(key: String, priority: Priority, now: Int64, waiter: @escaping Waiter,
                     makeJob: () -> Job) -> Joined {
        let (joined, raise) = state.withLock { state -> (Joined, Job?) in
            state.nextToken += 1
            let token = state.nextToken
            let ticket = Ticket(key: key, token: token)
            // The flight changes in place (`flights[key]!.…`): a copy taken out of the map
            // would share its waiting list with the map's, and each join would copy the whole
            // list (quadratic in a flight of hundreds).
            func lead() -> (Joined, Job?) {
                let job = makeJob()
                state.flights[key] = FlightStateMachine(job: job, leader: token, waiter: waiter)
                return (Joined(ticket: ticket, role: .leader, job: job, ready: nil, flight: job), nil)
            }
            guard state.flights[key] != nil else { return lead() }
            switch state.flights[key]!.join(token: token, waiter: waiter, now: now) {
            case .replace:
                return lead()  // the kept flight's release finds another job here and leaves it
            case .answer(let outcome):
                return (Joined(ticket: ticket, role: .finished, job: nil, ready: outcome, flight: nil), nil)
            case .wait(let job):
                return (Joined(ticket: ticket, role: .follower, job: nil, ready: nil, flight: job), job)
            }
        }
        raise?.raisePriority(to: priority)  // a queued fetch takes its highest waiter's priority
        return joined
    }

    /// Removes a waiter that no longer wants the result (its client went away). Returns the
    /// job to stop when that was the last waiter and abandoned flights are stopped.
    package func leave(_ ticket: Ticket) -> Job? {
        state.withLock { state -> Job? in
            guard state.flights[ticket.key] != nil else { return nil }
            switch state.flights[ticket.key]!.leave(token: ticket.token, abandonable: abortWhenAbandoned) {  // in place, as in `join`
            case .none, .stay:
                return nil
            case .abandon:
                let job = state.flights[ticket.key]!.job
                state.remove(ticket.key)
                return job
            }
        }
    }

    /// Delivers `outcome` to every waiter of the flight that `job` runs. A job whose flight
    /// was already abandoned, answered or replaced delivers nothing. With `keep`, the flight
    /// stays, answering newcomers at once, until `release`.
    package func complete(key: String, job: Job, with outcome: Outcome, keep: Bool = false) {
        let waiters = state.withLock { state -> [(Waiter, Role)] in
            guard state.flights[key]?.job === job else { return [] }
            switch state.flights[key]!.complete(with: outcome, keep: keep) {  // in place, as in `join`
            case .none:
                return []
            case .answer(let waiters, let remove):
                if remove { state.remove(key) }
                return waiters
            }
        }
        for (waiter, role) in waiters { waiter(outcome, role) }
    }

    /// Ends a flight kept by `complete(…, keep: true)`.
    package func release(key: String, job: Job) {
        state.withLock { state in
            if let flight = state.flights[key], flight.job === job, flight.canRelease { state.remove(key) }
        }
    }

    /// The job in flight for `key`, if any.
    package func job(for key: String) -> Job? {
        state.withLock { $0.flights[key]?.job }
    }

    package var inFlightCount: Int { state.withLock { $0.flights.count } }

    /// Blocks until no fetch is in flight or `timeout` passes (shutdown's grace period);
    /// woken by the last flight's end, not by polling. Returns whether none is left.
    package func waitUntilIdle(timeout: Duration) -> Bool {
        let signal = DispatchSemaphore(value: 0)
        let idle = state.withLock { state -> Bool in
            if state.flights.isEmpty { return true }
            state.idleWaiters.append(signal)
            return false
        }
        if idle { return true }
        _ = signal.wait(timeout: .now() + .milliseconds(Int(timeout / .milliseconds(1))))
        return state.withLock { $0.flights.isEmpty }
    }

    package func waiterCount(key: String) -> Int {
        state.withLock { $0.flights[key]?.waiterCount ?? 0 }
    }
}
