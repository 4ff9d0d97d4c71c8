import BlobStore
import Upstream

/// One flight (one fetch or one resize for one cache key) as a plain value: each transition
/// changes the state and returns what its owner must do, and nothing here runs a waiter,
/// touches a lock or starts a job (async-http-client's connection state machines, Varnish's
/// busy object). `Coalescer` holds one per key under its lock, and runs the actions after
/// unlocking.
///
///     running(waiters) ──complete(keep)──► finished(outcome) ──release──► gone
///            │                                    └──join(expired)──► replaced by a new flight
///            │         ──complete──────────────────────────────────────► gone
///            └──leave(last waiter, abandonable)─────────────────────────► gone (job abandoned)
struct FlightStateMachine<Job: AnyObject>: Sendable where Job: Sendable {
    typealias Waiter = @Sendable (FlightOutcome, FlightRole) -> Void

    enum State: Sendable {
        case running(waiters: [UInt64: Waiter])
        /// Answered; kept (answering newcomers at once) until the store has committed.
        case finished(FlightOutcome)
    }

    let job: Job
    let leader: UInt64
    private(set) var state: State

    init(job: Job, leader: UInt64, waiter: @escaping Waiter) {
        self.job = job
        self.leader = leader
        state = .running(waiters: [leader: waiter])
    }

    enum JoinAction {
        /// Wait with the others; a fetch takes the highest priority of its waiters.
        case wait(raisePriority: Job)
        /// The flight has finished: answer at once with its outcome (a hit).
        case answer(FlightOutcome)
        /// The flight has finished with an object that is no longer fresh at `now` (an origin's
        /// `max-age=0`): not a hit, as the stored copy would not be. A new flight takes its place.
        case replace
    }

    /// `now`: seconds since 1970, as an object's `expiresAt`.
    mutating func join(token: UInt64, waiter: @escaping Waiter, now: Int64) -> JoinAction {
        switch state {
        case .running(var waiters):
            // The state lets go of its dictionary first: a copy held there would make this
            // insert copy every waiter (quadratic in a flight of hundreds).
            state = .running(waiters: [:])
            waiters[token] = waiter
            state = .running(waiters: waiters)
            return .wait(raisePriority: job)
        case .finished(.success(let object)) where !object.isFresh(at: now):
            return .replace
        case .finished(let outcome):
            return .answer(outcome)
        }
    }

    enum LeaveAction: Equatable {
        /// Not a waiter (any more), or the flight has finished: nothing to do.
        case none
        /// Others still wait (or the flight runs on for the cache).
        case stay
        /// The last waiter left and abandoned flights stop: remove the flight, stop the job.
        case abandon
    }

    mutating func leave(token: UInt64, abandonable: Bool) -> LeaveAction {
        guard case .running(var waiters) = state, waiters[token] != nil else { return .none }
        state = .running(waiters: [:])  // as in `join`: the dictionary unique before it changes
        waiters.removeValue(forKey: token)
        state = .running(waiters: waiters)
        return waiters.isEmpty && abandonable ? .abandon : .stay
    }

    enum CompleteAction {
        /// Already answered (a second completion, a timed-out job's late result): nothing.
        case none
        /// Answer these waiters; `remove`: the flight ends now (else it is kept until `release`).
        case answer([(Waiter, FlightRole)], remove: Bool)
    }

    mutating func complete(with outcome: FlightOutcome, keep: Bool) -> CompleteAction {
        guard case .running(let waiters) = state else { return .none }
        let answered = waiters.map { token, waiter in (waiter, token == leader ? FlightRole.leader : .follower) }
        state = .finished(outcome)
        return .answer(answered, remove: !keep)
    }

    /// Whether the flight can end: only once answered (a release before completion is ignored).
    var canRelease: Bool {
        if case .finished = state { return true }
        return false
    }

    var waiterCount: Int {
        if case .running(let waiters) = state { return waiters.count }
        return 0
    }

    var isFinished: Bool { canRelease }
}
