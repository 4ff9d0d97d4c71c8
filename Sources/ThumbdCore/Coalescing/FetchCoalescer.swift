import BlobStore
import Dispatch
import Synchronization
import Upstream

/// What a flight runs: an upstream fetch (`FetchJob`) or a resize (`ResizeJob`).
public protocol CoalescedJob: AnyObject, Sendable {
    /// A waiter with a higher priority joined.
    func raisePriority(to priority: Priority)
}

extension FetchJob: CoalescedJob {}

/// How a request met its flight: it started it (`miss`), joined it in flight (`coalesced`),
/// or came after it had finished, while its result was being stored (`hit`: that result is
/// what the cache holds).
public enum FlightRole: Sendable { case leader, follower, finished }

/// What every waiter of a flight gets.
public typealias FlightOutcome = Result<CachedObject, ThumbdError>

/// One upstream fetch per cache key.
public typealias FetchCoalescer = Coalescer<FetchJob>

/// At most one flight per cache key: one upstream fetch, or one resize. The first asker creates the in-flight entry
/// (`leader`: its response says `miss`); later askers join its waiting list (`follower`:
/// `coalesced`). All get the same outcome. Waiters are picked under the lock and called
/// after it is released (Varnish's two-phase rush), so a waiter can never deadlock the map.
///
/// A flight can be completed while it is kept (`complete(…, keep: true)`): its waiters are
/// answered at once, and askers arriving before `release` get the outcome without waiting
/// (`Joined.ready`). That lets the store commit happen off the clients' critical path
/// without opening a window for a second fetch.
public final class Coalescer<Job: CoalescedJob>: Sendable {
    public typealias Outcome = FlightOutcome
    public typealias Role = FlightRole
    public typealias Waiter = @Sendable (Outcome, Role) -> Void

    /// Identifies one waiter, to leave the waiting list.
    public struct Ticket: Sendable, Hashable {
        public let key: String
        let token: UInt64
    }

    public struct Joined: Sendable {
        public let ticket: Ticket
        public let role: Role
        /// Set for the leader only: the job it must submit.
        public let job: Job?
        /// Set when the flight had already finished: answer with this, do not wait.
        public let ready: Outcome?
        /// The job the flight runs (for progress), unless it had finished.
        public let flight: Job?
    }

    private struct Flight {
        let job: Job
        let leader: UInt64
        var waiters: [UInt64: Waiter] = [:]
        var outcome: Outcome?
    }

    private struct State {
        var flights: [String: Flight] = [:]
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

    public init(abortWhenAbandoned: Bool) {
        self.abortWhenAbandoned = abortWhenAbandoned
    }

    /// Joins the fetch for `key`, creating it with `makeJob` when none is in flight.
    public func join(key: String, priority: Priority, waiter: @escaping Waiter,
                     makeJob: () -> Job) -> Joined {
        state.withLock { state in
            state.nextToken += 1
            let token = state.nextToken
            let ticket = Ticket(key: key, token: token)
            if var flight = state.flights[key] {
                if let outcome = flight.outcome {
                    return Joined(ticket: ticket, role: .finished, job: nil, ready: outcome, flight: nil)
                }
                flight.waiters[token] = waiter
                state.flights[key] = flight
                flight.job.raisePriority(to: priority)  // a queued fetch takes its highest waiter's priority
                return Joined(ticket: ticket, role: .follower, job: nil, ready: nil, flight: flight.job)
            }
            let job = makeJob()
            state.flights[key] = Flight(job: job, leader: token, waiters: [token: waiter])
            return Joined(ticket: ticket, role: .leader, job: job, ready: nil, flight: job)
        }
    }

    /// Removes a waiter that no longer wants the result (its client went away). Returns the
    /// job to cancel when that was the last waiter and abandoned fetches are aborted.
    public func leave(_ ticket: Ticket) -> Job? {
        state.withLock { state -> Job? in
            guard var flight = state.flights[ticket.key], flight.outcome == nil,
                  flight.waiters.removeValue(forKey: ticket.token) != nil
            else { return nil }
            if flight.waiters.isEmpty && abortWhenAbandoned {
                state.remove(ticket.key)
                return flight.job
            }
            state.flights[ticket.key] = flight
            return nil
        }
    }

    /// Delivers `outcome` to every waiter of the flight that `job` runs. A job whose flight
    /// was already abandoned (or replaced) delivers nothing. With `keep`, the flight stays,
    /// answering newcomers at once, until `release`.
    public func complete(key: String, job: Job, with outcome: Outcome, keep: Bool = false) {
        let waiters = state.withLock { state -> [(Waiter, Role)] in
            guard var flight = state.flights[key], flight.job === job, flight.outcome == nil else { return [] }
            let waiting = flight.waiters.map { token, waiter in (waiter, token == flight.leader ? Role.leader : .follower) }
            if keep {
                flight.outcome = outcome
                flight.waiters.removeAll()
                state.flights[key] = flight
            } else {
                state.remove(key)
            }
            return waiting
        }
        for (waiter, role) in waiters { waiter(outcome, role) }
    }

    /// Ends a flight kept by `complete(…, keep: true)`.
    public func release(key: String, job: Job) {
        state.withLock { state in
            if let flight = state.flights[key], flight.job === job { state.remove(key) }
        }
    }

    /// The job in flight for `key`, if any.
    public func job(for key: String) -> Job? {
        state.withLock { $0.flights[key]?.job }
    }

    public var inFlightCount: Int { state.withLock { $0.flights.count } }

    /// Blocks until no fetch is in flight or `timeout` passes (shutdown's grace period);
    /// woken by the last flight's end, not by polling. Returns whether none is left.
    public func waitUntilIdle(timeout: Duration) -> Bool {
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

    public func waiterCount(key: String) -> Int {
        state.withLock { $0.flights[key]?.waiters.count ?? 0 }
    }
}
