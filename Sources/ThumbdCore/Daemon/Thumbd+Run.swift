import Dispatch
import ServiceLifecycle

/// Running the daemon from async code: started off the cooperative pool, run as one
/// service, or stopped on the caller's thread (LIFECYCLE.md).
extension Thumbd {
    /// The daemon as one service (a test, or a program that embeds it): starts it, then
    /// runs its parts in a `ServiceGroup` of their own, which the enclosing group's graceful
    /// shutdown (or cancellation) stops in order.
    package func run() async throws {
        try await startOffThePool()
        let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: logger))
        defer { phase.withLock { $0 = .stopped } }  // every part has stopped when the group returns
        try await withGracefulShutdownHandler {
            try await group.run()
        } onGracefulShutdown: {
            Task { await group.triggerGracefulShutdown() }
        }
    }

    /// Stops every part, in the order of a graceful shutdown (`services(…)`), and waits
    /// for them: what the group does, on the caller's thread.
    package func shutdown() {
        guard case .running(let parts) = phase.withLock({ phase in
            defer { if case .running = phase { phase = .stopped } }
            return phase
        }) else { return }
        for service in parts.services.reversed() { service.stop() }
    }
}
