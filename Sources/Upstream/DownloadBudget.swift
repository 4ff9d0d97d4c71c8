import Synchronization

/// The memory every downloaded body holds, all transfer loops together, from its first byte
/// until the last holder of the finished body lets it go (the processing queue, the store's
/// write, the resize queue, a response still being sent): so that the sum an operator sets
/// `MemoryMax` by adds up however many transfers run and however slowly their bodies drain.
///
/// A transfer charges its buffer before it grows it (the whole `Content-Length` at its first
/// byte, or the next step of a body without one). When the charge does not fit, the transfer
/// is paused (`CURL_WRITEFUNC_PAUSE`: curl stops reading its socket, the origin's TCP window
/// closes) until memory is given back, and its loop is woken to resume it.
///
/// Paused transfers could hold the whole budget with partial bodies and wait for each other
/// for ever. So one transfer at a time may go past the limit, by at most one body
/// (`maxObjectBytes`), and it keeps that right until its body is freed: at every moment
/// downloaded bodies hold at most `limit + maxObjectBytes`, and one of them always moves.
public final class DownloadBudget: Sendable {
    private struct State {
        var limit: Int
        var used = 0
        /// The one transfer allowed past the limit, until its body is freed.
        var overdraft: ObjectIdentifier?
        /// The most ever held at once (tests and metrics).
        var peak = 0
        var paused = 0
        /// Counts every give-back (and limit change): a loop resumes its paused transfers
        /// only when this moved.
        var releases: UInt64 = 0
    }

    private let state: Mutex<State>
    /// Each loop's multi handle, woken so that its paused transfers try again. Woken under
    /// this lock (each is a non-blocking eventfd write), so that a loop that has stopped and
    /// closed its eventfd is never written to: it takes its handle out first (`stopWaking`).
    private let wakers = Mutex<[ObjectIdentifier: MultiHandle]>([:])

    public init(limit: Int) {
        state = Mutex(State(limit: limit))
    }

    /// A new limit (a reload): bodies held now stay; new charges see it.
    public func setLimit(_ limit: Int) {
        state.withLock {
            $0.limit = limit
            $0.releases &+= 1
        }
        wake()
    }

    func wake(_ multi: MultiHandle) {
        wakers.withLock { $0[ObjectIdentifier(multi)] = multi }
    }

    func stopWaking(_ multi: MultiHandle) {
        _ = wakers.withLock { $0.removeValue(forKey: ObjectIdentifier(multi)) }
    }

    public struct Usage: Sendable, Equatable {
        /// Bytes held by downloaded bodies now.
        public var held: Int
        /// The most held at once since the start.
        public var peak: Int
        /// Transfers waiting for memory now.
        public var paused: Int

        public init(held: Int, peak: Int, paused: Int) {
            self.held = held
            self.peak = peak
            self.paused = paused
        }
    }

    public var usage: Usage { state.withLock { Usage(held: $0.used, peak: $0.peak, paused: $0.paused) } }

    /// Charges `bytes` more to `charge`; false (nothing charged) when they do not fit and
    /// `charge` may not go past the limit: it may when it is past it already, or when no
    /// other is.
    fileprivate func take(_ bytes: Int, for charge: DownloadCharge) -> Bool {
        let owner = ObjectIdentifier(charge)
        return state.withLock { state in
            if state.used + bytes > state.limit {
                guard state.overdraft == nil || state.overdraft == owner else { return false }
                state.overdraft = owner
            }
            state.used += bytes
            state.peak = max(state.peak, state.used)
            return true
        }
    }

    /// Gives back `bytes` of `charge`'s; `done` when it holds nothing any more (it is being
    /// freed: its identifier may be reused after this).
    fileprivate func give(_ bytes: Int, for charge: DownloadCharge, done: Bool) {
        let owner = ObjectIdentifier(charge)
        let waiting = state.withLock { state -> Bool in
            state.used -= bytes
            state.releases &+= 1
            if done, state.overdraft == owner { state.overdraft = nil }
            return state.paused > 0
        }
        if waiting { wake() }
    }

    var releases: UInt64 { state.withLock { $0.releases } }

    /// A transfer paused for memory, or resumed.
    func paused(_ delta: Int) { state.withLock { $0.paused += delta } }

    private func wake() {
        wakers.withLock { wakers in
            for multi in wakers.values { multi.wakeup() }
        }
    }
}

/// What one download holds of the budget. Its transfer grows it on the loop thread while the
/// body comes in; the finished body (`Bytes`) then keeps it alive, so that it is given back
/// when the body is freed, on whichever thread drops it last.
final class DownloadCharge: @unchecked Sendable {  // `bytes` changes only on the loop thread, before the body is handed over
    private let budget: DownloadBudget
    private(set) var bytes = 0

    init(budget: DownloadBudget) { self.budget = budget }

    /// Makes the charge `total`; false when the budget has no room (nothing changed).
    func grow(to total: Int) -> Bool {
        guard total > bytes else { return true }
        guard budget.take(total - bytes, for: self) else { return false }
        bytes = total
        return true
    }

    /// Makes the charge `total` (room given back when the finished body was trimmed).
    func shrink(to total: Int) {
        guard total < bytes else { return }
        budget.give(bytes - total, for: self, done: false)
        bytes = total
    }

    deinit { budget.give(bytes, for: self, done: true) }
}
