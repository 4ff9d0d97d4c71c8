import BlobStore
import Upstream

/// What a request asks for: an original, or one variant of it.
enum LookupTarget: Sendable {
    case original(DestinationPolicy.Destination)
    case variant(Variant, of: DestinationPolicy.Destination)

    var destination: DestinationPolicy.Destination {
        switch self {
        case .original(let destination), .variant(_, of: let destination): destination
        }
    }

    var key: String {
        switch self {
        case .original(let destination): destination.url
        case .variant(let variant, of: let destination): variant.key(of: destination.url)
        }
    }
}

/// How to leave the flight a request waits on (its client went away, its batch was cancelled).
enum FlightTicket: Sendable {
    case fetch(FetchCoalescer.Ticket)
    case resize(Coalescer<ResizeJob>.Ticket)
}

/// What the store holds for a key decides what happens next, once, here (Varnish's
/// `cnt_lookup`): a plain function of the stored copy and the time.
enum LookupDecision: Sendable {
    /// Fresh: answer it (a stored 404/410 is a negative hit).
    case hit(CachedObject)
    /// Expired within its grace: answer it now, and refresh it behind the answer.
    case stale(CachedObject)
    /// Nothing servable: join or start the flight. `stale`: the expired image, to revalidate
    /// with and to answer if the origin fails.
    case miss(stale: CachedObject?)

    static func decide(_ stored: CachedObject?, now: Int64, servableStale: (CachedObject) -> Bool) -> LookupDecision {
        guard let stored else { return .miss(stale: nil) }
        if stored.isFresh(at: now) { return .hit(stored) }
        guard stored.status == 200 else { return .miss(stale: nil) }
        return servableStale(stored) ? .stale(stored) : .miss(stale: stored)
    }
}

/// What one waiter of a flight is answered, decided here once for `/thumb` and batch items
/// alike: the flight's object, or, when the origin failed (5xx, unreachable, a timeout) and an
/// expired copy is held whose origin did not say must-revalidate, that copy (stale-if-error;
/// not for 404/410, where the origin said the image is gone).
enum Settled: Sendable {
    case object(CachedObject, CacheResult)
    case stale(CachedObject)
    case failure(ThumbdError, CacheResult)

    init(_ outcome: FlightOutcome, role: FlightRole, stale: CachedObject?) {
        switch outcome {
        case .success(let object):
            self = .object(object, CacheResult.of(role, object))
        case .failure(let error):
            if let stale, error.status >= 500, stale.graceSeconds != Freshness.mustRevalidate {
                self = .stale(stale)
            } else {
                self = .failure(error, CacheResult.of(role, nil))
            }
        }
    }
}

/// The one path from a key to its answer, for `/thumb` originals, variants and batch items
/// alike: the decision above, then the flight (one fetch or one resize per key), whose
/// waiters the caller renders.
struct Lookup: Sendable {
    let source: ObjectSource
    let variants: VariantSource

    enum Answer: Sendable {
        /// From the store, fresh.
        case hit(CachedObject)
        /// From the store, within its grace; a refresh runs behind it.
        case stale(CachedObject)
        /// A flight finished a moment ago and is being stored: its outcome, at once (a hit).
        case ready(FlightOutcome, stale: CachedObject?)
        /// Waits for the flight; `progress`: the original's download, when one runs;
        /// `urgencies`: the queue places of the jobs it waits on (the resize and the
        /// original's fetch), which a batch's focus moves.
        /// `resize`: the resize it waits on (for its preview), when it is a variant.
        case waiting(FlightTicket, progress: FetchJob?, urgencies: [Urgency], resize: ResizeJob?)
    }

    /// Gets the outcome of a flight, exactly once unless the ticket leaves first; `stale`:
    /// the expired copy the flight revalidates, to answer if the origin fails.
    typealias Waiter = @Sendable (FlightOutcome, FlightRole, _ stale: CachedObject?) -> Void

    /// `preview`: a variant's resize also makes a preview from its decode (a batch's).
    /// `patient`: a batch waits, so a full resize queue makes it wait rather than fail.
    /// `onScreen`: a batch shows it now (before its focus reaches the jobs' urgencies).
    /// `waiter` makes the waiter, and is called only when there is a flight to wait on: a hit
    /// makes no closure (its captures were a heap allocation on every hit).
    /// `clock`: the caller's clock reading in Unix milliseconds (`CacheStore.nowMilliseconds`),
    /// when it has one: one reading a request, not one a step. The object found counts as used
    /// then (LRU), recorded by the lookup itself.
    func request(_ target: LookupTarget, priority: Priority, requestID: String?, preview: Bool = false,
                 patient: Bool = false, onScreen: Bool = false, clock: Int64 = CacheStore.nowMilliseconds(),
                 waiter makeWaiter: () -> Waiter) -> Answer {
        let key = target.key
        let now = clock / 1000
        let stored = source.cached(key, accessedAt: clock)
        switch LookupDecision.decide(stored, now: now, servableStale: { source.servableStale($0, at: now) }) {
        case .hit(let object):
            return .hit(object)
        case .stale(let object):
            switch target {
            case .original(let destination):
                source.refreshInBackground(destination, stale: object, requestID: requestID)
            case .variant(let variant, of: let destination):
                _ = variants.make(variant, of: destination, priority: .normal, stale: object, requestID: requestID) { _, _ in }
            }
            return .stale(object)
        case .miss(let stale):
            let waiter = makeWaiter()
            switch target {
            case .original(let destination):
                let joined = source.fetch(destination, priority: priority, stale: stale, requestID: requestID) { outcome, role in
                    waiter(outcome, role, stale)
                }
                if let ready = joined.ready { return .ready(ready, stale: stale) }
                return .waiting(.fetch(joined.ticket), progress: joined.flight, urgencies: joined.flight.map { [$0.urgency] } ?? [],
                                resize: nil)
            case .variant(let variant, of: let destination):
                let joined = variants.make(variant, of: destination, priority: priority, stale: stale, requestID: requestID,
                                           preview: preview, patient: patient, onScreen: onScreen) { outcome, role in
                    waiter(outcome, role, stale)
                }
                if let ready = joined.ready { return .ready(ready, stale: stale) }
                let fetch = source.coalescer.job(for: destination.url)
                return .waiting(.resize(joined.ticket), progress: fetch,
                                urgencies: [joined.flight?.urgency, fetch?.urgency].compactMap { $0 }, resize: joined.flight)
            }
        }
    }

    /// The waiter is gone: the last one to leave a flight stops it (a fetch when so
    /// configured, a resize always).
    func leave(_ ticket: FlightTicket) {
        switch ticket {
        case .fetch(let ticket): source.leave(ticket)
        case .resize(let ticket): variants.leave(ticket)
        }
    }
}
