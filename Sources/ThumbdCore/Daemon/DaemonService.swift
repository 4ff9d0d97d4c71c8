import Dispatch
import Logging
import ServiceLifecycle
import Synchronization

/// One part of the running daemon as a swift-service-lifecycle `Service`, in the daemon's
/// one `ServiceGroup`. The part was started when the daemon was built (`Thumbd.start`; if a
/// later part fails, it stops the services of those it had started, in the same order as
/// a shutdown: `Thumbd.stopStarted`); `run()` waits
/// for the group's graceful shutdown, then stops the part. The group shuts its services down
/// in reverse order, each once the one after it has returned, so the order of the list in
/// `Thumbd.services(…)` is the daemon's shutdown order, written once.
package final class DaemonService: Service, Sendable, CustomStringConvertible {
    /// The part's name, as the group's log names the service.
    package let description: String
    private let body: @Sendable () -> Void
    private let logger: Logger
    private let stopped = Atomic<Bool>(false)

    init(_ name: String, logger: Logger, stop: @escaping @Sendable () -> Void) {
        description = name
        self.logger = logger
        body = stop
    }

    package func run() async throws {
        try? await gracefulShutdown()  // or the group was cancelled: stop all the same
        // Stopping waits for threads to exit and for SQLite to checkpoint: never on the
        // cooperative pool, nor on the global queue's few threads (a serial queue of its own
        // gets a thread however busy the process is).
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue(label: "thumbd.stop").async { [self] in
                stop()
                done.resume()
            }
        }
    }

    /// Stops the part, once (the group, `Thumbd.shutdown()` and a failed start may ask).
    func stop() {
        guard stopped.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        body()
        logger.debug("thumbd.part.stopped", metadata: ["part": "\(description)"])
    }
}
