import Dispatch
import ServiceLifecycle
import Synchronization
#if canImport(Darwin)
import Darwin
#else
import Glibc
#endif

/// SIGTERM and SIGINT, caught from the first line of `thumbd serve`: one that arrives while
/// the daemon starts, or the instant after "listening" is printed, is kept, and starts the
/// service group's graceful shutdown as soon as the group exists (`attach`), so the daemon
/// stops as it always does and exits 0. The group's own `gracefulShutdownSignals` were
/// installed only once its `run()` had begun, after readiness was announced: a SIGTERM
/// sent right after "listening" took the signal's default action (killed, in 26 of 30 tries).
final class ShutdownSignals: Sendable {
    private let state = Mutex<(requested: Bool, group: ServiceGroup?)>((false, nil))

    /// Catches both signals on `queue`; the caller keeps the sources, and cancels them when
    /// the daemon has stopped.
    func catchSignals(on queue: DispatchQueue) -> [any DispatchSourceSignal] {
        [SIGTERM, SIGINT].map { number in
            #if canImport(Darwin)
            signal(number, SIG_IGN)  // kqueue delivers it only when the default action is off
            #endif
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in requested() }
            source.resume()
            return source
        }
    }

    /// The group whose graceful shutdown a signal starts; one that came before it starts it now.
    func attach(_ group: ServiceGroup) {
        let early = state.withLock { state -> Bool in
            state.group = group
            return state.requested
        }
        if early { Task { await group.triggerGracefulShutdown() } }
    }

    private func requested() {
        let group = state.withLock { state -> ServiceGroup? in
            state.requested = true
            return state.group
        }
        if let group { Task { await group.triggerGracefulShutdown() } }
    }
}
