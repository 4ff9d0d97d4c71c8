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
/// (`maxObjectBytes`), and it keeps that right until its body is freed; and a small body
/// (at most `smallBody`, a tile's original) that finds the budget full takes from a reserve
/// of an eighth of it, so that small misses do not wait behind large bodies. At every moment
/// downloaded bodies hold at most `limit + limit / 8 + maxObjectBytes`, and one always moves.
public final class DownloadBudget: Sendable {
    private struct State {
        var limit: Int
        var used = 0
        /// Bytes small bodies hold of the reserve (`limit / 8`) while the budget is full.
        var reserveUsed = 0
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

    /// A body this size or smaller may take from the reserve when the budget is full.
    public static let smallBody = 64 << 10

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

    public var usage: Usage {
        state.withLock { Usage(held: $0.used + $0.reserveUsed, peak: $0.peak, paused: $0.paused) }
    }

    fileprivate enum Pool { case main, reserve }

    /// Charges `bytes` more to `charge`, whose total becomes `total`; nil (nothing charged)
    /// when they do not fit. Past the limit, a small body takes from the reserve, and a large
    /// one may go on when it is past the limit already, or when no other is.
    fileprivate func take(_ bytes: Int, total: Int, for charge: DownloadCharge) -> Pool? {
        let owner = ObjectIdentifier(charge)
        return state.withLock { state in
            var pool = Pool.main
            if state.used + bytes > state.limit {
                if total <= Self.smallBody, state.reserveUsed + bytes <= state.limit / 8 {
                    pool = .reserve
                } else {
                    guard state.overdraft == nil || state.overdraft == owner else { return nil }
                    state.overdraft = owner
                }
            }
            switch pool {
            case .main: state.used += bytes
            case .reserve: state.reserveUsed += bytes
            }
            state.peak = max(state.peak, state.used + state.reserveUsed)
            return pool
        }
    }

    /// Gives back what `charge` held of each pool; `done` when it holds nothing any more (it
    /// is being freed: its identifier may be reused after this).
    fileprivate func give(main: Int, reserve: Int, for charge: DownloadCharge, done: Bool) {
        let owner = ObjectIdentifier(charge)
        let waiting = state.withLock { state -> Bool in
            state.used -= main
            state.reserveUsed -= reserve
            state.releases &+= 1
            if done, state.overdraft == owner { state.overdraft = nil }
            return state.paused > 0
        }
        if waiting { wake() }
    }

    /// The give-backs so far, when a transfer is paused for memory (nil: none is): what a
    /// loop reads each turn, in one lock.
    var releasesWhilePaused: UInt64? { state.withLock { $0.paused > 0 ? $0.releases : nil } }

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
/// when the body is freed, on whichever thread drops it last (atomics: that thread reads
/// what the loop thread wrote).
final class DownloadCharge: Sendable {
    private let budget: DownloadBudget
    /// What it holds of the budget proper, and of the reserve for small bodies.
    private let main = Atomic<Int>(0)
    private let reserve = Atomic<Int>(0)

    init(budget: DownloadBudget) { self.budget = budget }

    var bytes: Int { main.load(ordering: .acquiring) + reserve.load(ordering: .acquiring) }

    /// Makes the charge `total`; false when the budget has no room (nothing changed).
    func grow(to total: Int) -> Bool {
        let now = bytes
        guard total > now else { return true }
        switch budget.take(total - now, total: total, for: self) {
        case .main: main.add(total - now, ordering: .releasing)
        case .reserve: reserve.add(total - now, ordering: .releasing)
        case nil: return false
        }
        return true
    }

    /// Makes the charge `total` (room given back when the finished body was trimmed): from
    /// the budget proper first.
    func shrink(to total: Int) {
        var excess = bytes - total
        guard excess > 0 else { return }
        let fromMain = min(excess, main.load(ordering: .acquiring))
        excess -= fromMain
        main.subtract(fromMain, ordering: .releasing)
        reserve.subtract(excess, ordering: .releasing)
        budget.give(main: fromMain, reserve: excess, for: self, done: false)
    }

    deinit {
        budget.give(main: main.load(ordering: .acquiring), reserve: reserve.load(ordering: .acquiring), for: self, done: true)
    }
}
