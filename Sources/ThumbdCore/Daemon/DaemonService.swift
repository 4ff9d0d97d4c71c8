import Dispatch
import Logging
import ServiceLifecycle
import Synchronization

/// One part of the daemon as a swift-service-lifecycle `Service`, in the daemon's one
/// `ServiceGroup`: `run()` starts the part, serves until the group's graceful shutdown, then
/// stops it. The group runs its services at once and stops them in reverse order, each once
/// the one after it has returned; the parts must also start in order (the store before
/// whatever writes to it), so each service waits for the one before it to have started
/// (`StartOrder`). The order of the list in `Thumbd.services(…)` is thus the daemon's start
/// order and, read backwards, its shutdown order: written once.
///
/// A part that fails to start throws: the group then shuts down gracefully, in the same
/// reverse order. The services after it, still waiting for their turn, return when their
/// own graceful shutdown comes, having started nothing; the ones before it stop their
/// parts, as in any shutdown.
package final class DaemonService: Service, Sendable, CustomStringConvertible {
    /// The part's name, as the group's log names the service.
    package let description: String
    private let index: Int
    private let order: StartOrder
    private let startBody: @Sendable () throws -> Void
    private let stopBody: @Sendable () -> Void
    private let logger: Logger
    private let phase = Mutex(Phase.waiting)

    private enum Phase {
        case waiting, starting, started, stopped
    }

    init(_ name: String, index: Int, order: StartOrder, logger: Logger, start: @escaping @Sendable () throws -> Void,
         stop: @escaping @Sendable () -> Void) {
        description = name
        self.index = index
        self.order = order
        self.logger = logger
        startBody = start
        stopBody = stop
    }

    package func run() async throws {
        // Its turn, or its graceful shutdown first (then nothing was started, nothing stops).
        let turn = await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await order.turn(index)
            } onGracefulShutdown: { [order, index] in
                order.leave(index)
            }
        } onCancel: { [order, index] in
            order.leave(index)
        }
        guard turn, !Task.isShuttingDownGracefully else {
            order.abandon()
            return
        }
        do {
            try await Self.offThePool { try self.start() }
        } catch {
            order.abandon()
            throw error
        }
        order.started(index)
        try? await gracefulShutdown()  // or the group was cancelled: stop all the same
        await Self.offThePool { self.stop() }
    }

    /// Starts the part, once (the group's `run()`, or `Thumbd.start()` on the caller's thread).
    func start() throws {
        guard phase.withLock({ phase in
            guard case .waiting = phase else { return false }
            phase = .starting
            return true
        }) else { return }
        do {
            try startBody()
        } catch {
            phase.withLock { $0 = .stopped }  // a part that fails to start leaves nothing running
            throw error
        }
        phase.withLock { $0 = .started }
        logger.debug("thumbd.part.started", metadata: ["part": "\(description)"])
    }

    /// Stops the part if it started, once (the group, `Thumbd.shutdown()` and a failed start
    /// may ask).
    func stop() {
        guard phase.withLock({ phase in
            defer { phase = .stopped }
            if case .started = phase { return true }
            return false
        }) else { return }
        stopBody()
        logger.debug("thumbd.part.stopped", metadata: ["part": "\(description)"])
    }

    /// Starting opens files and starts threads; stopping waits for threads to exit and for
    /// SQLite to checkpoint: never on the cooperative pool, which other tasks need
    /// meanwhile, nor on the global queue, whose few threads a busy process may hold (a
    /// serial queue of its own gets a thread however busy the process is).
    static func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<T, any Error>) in
            DispatchQueue(label: "thumbd.lifecycle").async {
                done.resume(with: Result { try work() })
            }
        }
    }

    static func offThePool(_ work: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue(label: "thumbd.lifecycle").async {
                work()
                done.resume()
            }
        }
    }
}

/// The order the group's services start in: each waits until the one before it has
/// started. Whoever awaits the whole start (`allStarted()`: "listening" is said then)
/// learns whether it completed.
final class StartOrder: Sendable {
    private struct State {
        let count: Int
        /// The index whose turn it is; `count` once every part has started.
        var next = 0
        /// A part failed to start, or a shutdown came first: no more turns.
        var abandoned = false
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        /// Services whose graceful shutdown came before their turn.
        var left: Set<Int> = []
        var whole: [CheckedContinuation<Bool, Never>] = []
    }

    private let state: Mutex<State>

    init(count: Int) { state = Mutex(State(count: count)) }

    /// Waits for `index`'s turn: true then; false once `leave(index)` is called for it.
    /// After an abandoned start the turn never comes, and the service waits for its own
    /// graceful shutdown: the group takes a service that returns before it asked as a
    /// failure, and would cancel the rest rather than stop them in order.
    func turn(_ index: Int) async -> Bool {
        await withCheckedContinuation { (turn: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool? in
                if state.left.contains(index) { return false }
                // Its turn, or it had started already (`Thumbd.start()` on a thread, then a group).
                if state.next > index || (state.next == index && !state.abandoned) { return true }
                state.waiters[index] = turn
                return nil
            }
            if let now { turn.resume(returning: now) }
        }
    }

    /// `index` will not start: its graceful shutdown came before its turn.
    func leave(_ index: Int) {
        let waiter = state.withLock { state in
            state.left.insert(index)
            return state.waiters.removeValue(forKey: index)
        }
        waiter?.resume(returning: false)
        abandon()
    }

    /// `index` has started: the next one's turn.
    func started(_ index: Int) {
        let (next, whole) = state.withLock { state -> (CheckedContinuation<Bool, Never>?, [CheckedContinuation<Bool, Never>]) in
            guard !state.abandoned, state.next == index else { return (nil, []) }
            state.next = index + 1
            if state.next == state.count {
                defer { state.whole.removeAll() }
                return (nil, state.whole)
            }
            return (state.waiters.removeValue(forKey: state.next), [])
        }
        next?.resume(returning: true)
        for waiter in whole { waiter.resume(returning: true) }
    }

    /// No part starts after this one: the services still waiting return once their own
    /// graceful shutdown comes (the group's, which a failed start begins), and whoever awaits
    /// the whole start learns it did not complete.
    func abandon() {
        let whole = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            guard state.next < state.count else { return [] }
            state.abandoned = true
            defer { state.whole.removeAll() }
            return state.whole
        }
        for waiter in whole { waiter.resume(returning: false) }
    }

    /// True once every part has started; false if the start was abandoned.
    func allStarted() async -> Bool {
        await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { state -> Bool? in
                if state.next == state.count { return true }
                if state.abandoned { return false }
                state.whole.append(done)
                return nil
            }
            if let now { done.resume(returning: now) }
        }
    }

    /// Whether every part has started.
    var complete: Bool { state.withLock { $0.next == $0.count } }
}
