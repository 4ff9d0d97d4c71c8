import Synchronization

/// At most one upstream fetch per cache key. The first asker creates the in-flight entry
/// (`leader`: its response says `miss`); later askers join its waiting list (`follower`:
/// `coalesced`). All get the same outcome. Waiters are picked under the lock and called
/// after it is released (Varnish's two-phase rush), so a waiter can never deadlock the map.
public final class FetchCoalescer: Sendable {
    public typealias Outcome = Result<CachedObject, ThumbdError>
    public typealias Waiter = @Sendable (Outcome, Role) -> Void

    public enum Role: Sendable { case leader, follower }

    /// Identifies one waiter, to leave the waiting list.
    public struct Ticket: Sendable, Hashable {
        public let key: String
        let token: UInt64
    }

    public struct Joined: Sendable {
        public let ticket: Ticket
        public let role: Role
        /// Set for the leader only: the job it must submit.
        public let job: FetchJob?
    }

    private struct Flight {
        let job: FetchJob
        let leader: UInt64
        var waiters: [UInt64: Waiter] = [:]
    }

    private struct State {
        var flights: [String: Flight] = [:]
        var nextToken: UInt64 = 0
    }

    private let state = Mutex(State())
    private let abortWhenAbandoned: Bool

    public init(abortWhenAbandoned: Bool) {
        self.abortWhenAbandoned = abortWhenAbandoned
    }

    /// Joins the fetch for `key`, creating it with `makeJob` when none is in flight.
    public func join(key: String, priority: Priority, waiter: @escaping Waiter,
                     makeJob: () -> FetchJob) -> Joined {
        state.withLock { state in
            state.nextToken += 1
            let token = state.nextToken
            let ticket = Ticket(key: key, token: token)
            if var flight = state.flights[key] {
                flight.waiters[token] = waiter
                state.flights[key] = flight
                flight.job.raisePriority(to: priority)  // a queued fetch takes its highest waiter's priority
                return Joined(ticket: ticket, role: .follower, job: nil)
            }
            let job = makeJob()
            state.flights[key] = Flight(job: job, leader: token, waiters: [token: waiter])
            return Joined(ticket: ticket, role: .leader, job: job)
        }
    }

    /// Removes a waiter that no longer wants the result (its client went away). Returns the
    /// job to cancel when that was the last waiter and abandoned fetches are aborted.
    public func leave(_ ticket: Ticket) -> FetchJob? {
        state.withLock { state -> FetchJob? in
            guard var flight = state.flights[ticket.key],
                  flight.waiters.removeValue(forKey: ticket.token) != nil
            else { return nil }
            if flight.waiters.isEmpty && abortWhenAbandoned {
                state.flights[ticket.key] = nil
                return flight.job
            }
            state.flights[ticket.key] = flight
            return nil
        }
    }

    /// Delivers `outcome` to every waiter of the flight that `job` runs. A job whose flight
    /// was already abandoned (or replaced) delivers nothing.
    public func complete(key: String, job: FetchJob, with outcome: Outcome) {
        let waiters = state.withLock { state -> [(Waiter, Role)] in
            guard let flight = state.flights[key], flight.job === job else { return [] }
            state.flights[key] = nil
            return flight.waiters.map { token, waiter in (waiter, token == flight.leader ? .leader : .follower) }
        }
        for (waiter, role) in waiters { waiter(outcome, role) }
    }

    /// The job in flight for `key`, if any.
    public func job(for key: String) -> FetchJob? {
        state.withLock { $0.flights[key]?.job }
    }

    public var inFlightCount: Int { state.withLock { $0.flights.count } }

    public func waiterCount(key: String) -> Int {
        state.withLock { $0.flights[key]?.waiters.count ?? 0 }
    }
}
