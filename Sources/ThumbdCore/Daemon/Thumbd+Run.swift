import Dispatch
import Logging
import ServiceLifecycle

/// Running the daemon from async code: its parts as the services of one group, or stopped
/// on the caller's thread (LIFECYCLE.md).
extension Thumbd {
    /// The daemon as one service (a test, or a program that embeds it): builds it, then
    /// runs its parts in a `ServiceGroup` of their own (`serviceGroup`), which the enclosing
    /// group's graceful shutdown (or cancellation) stops in order.
    package func run() async throws {
        try await buildOffThePool()
        let group = serviceGroup()
        defer { phase.withLock { $0 = .stopped } }  // every part has stopped when the group returns
        try await withGracefulShutdownHandler {
            try await group.run()
        } onGracefulShutdown: {
            Task { await group.triggerGracefulShutdown() }
        }
    }

    /// The group of the built daemon's services (`thumbd serve` and `run()`): each starts its
    /// part in turn. A service that returns or throws shuts the group down gracefully, in
    /// order, rather than cancelling it: cancelled, every service would stop at once.
    package func serviceGroup(logger: Logger? = nil) -> ServiceGroup {
        ServiceGroup(configuration: .init(
            services: services.map {
                .init(service: $0, successTerminationBehavior: .gracefullyShutdownGroup,
                      failureTerminationBehavior: .gracefullyShutdownGroup)
            },
            logger: logger ?? self.logger))
    }

    /// Stops every started part, in the order of a graceful shutdown (`services(…)`), and
    /// waits for them: what the group does, on the caller's thread.
    package func shutdown() {
        guard case .built(let parts) = phase.withLock({ phase in
            defer { if case .built = phase { phase = .stopped } }
            return phase
        }) else { return }
        parts.order.abandon()
        for service in parts.services.reversed() { service.stop() }
    }
}
