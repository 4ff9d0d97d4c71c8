import Foundation
import Logging
import Synchronization

/// The whole daemon: store, transfer loop, coalescer and HTTP server, started in that order
/// and stopped in reverse.
public final class Thumbd: Sendable {
    public let configuration: ThumbdConfiguration
    public let store: CacheStore
    private let loop: TransferLoop
    private let coalescer: FetchCoalescer
    private let batches: BatchRegistry
    private let stage: ProcessingStage
    private let server: HTTPServer
    private let logger: Logger

    /// The port the server listens on (the configured one, or the one picked for port 0).
    public var port: UInt16 { server.port }

    /// Requests currently waiting for a fetch (their connections are suspended).
    public var waitingRequests: Int { server.suspendedConnections }

    /// Distinct fetches in flight (queued or running).
    public var fetchesInFlight: Int { coalescer.inFlightCount }

    /// Memory held by finished batches kept for their retention.
    public var keptBatchBytes: Int { batches.keptFinishedBytes }

    /// Open `text/event-stream` responses.
    public var openEventStreams: Int { batches.openStreams }

    public init(configuration: ThumbdConfiguration, logger: Logger = Logger(label: "thumbd")) throws {
        self.configuration = configuration
        self.logger = logger
        let policy = DestinationPolicy(
            allowPrivateNetworks: configuration.upstream.allowPrivateNetworks,
            allowHosts: configuration.upstream.allowHosts)
        let store = try CacheStore(configuration: configuration.store, logger: logger)
        let loop = TransferLoop(configuration: configuration.upstream, policy: policy, logger: logger)
        let coalescer = FetchCoalescer(abortWhenAbandoned: configuration.upstream.abortWhenAbandoned)
        let stage = ProcessingStage()
        let source = ObjectSource(store: store, coalescer: coalescer, loop: loop, stage: stage,
                                  configuration: configuration, logger: logger)
        let batches = BatchRegistry(configuration: configuration.batches, source: source, policy: policy)
        let status = StatusBox()
        let admin = AdminHandler(source: source, policy: policy, maxBytes: configuration.store.maxBytes) {
            status.read()
        }
        let router = Router(thumb: ThumbHandler(source: source, policy: policy),
                            batches: BatchHandler(registry: batches, maxItems: configuration.batches.maxItems),
                            admin: admin, health: {
            do {
                _ = try store.lookup("thumbd:healthz")  // a read on a pooled connection
            } catch {
                return .unhealthy
            }
            if let failure = store.writeHealth {
                return .degraded("cache writes fail since \(failure.since.formatted(.iso8601)): \(failure.reason)")
            }
            return .ok
        }, requestGuard: RequestGuard(
            listenHost: (try? ListenAddress(parsing: configuration.server.listen).host) ?? "127.0.0.1",
            allowedHosts: configuration.server.allowedHosts, allowedOrigins: configuration.server.allowedOrigins))
        do {
            server = try HTTPServer(configuration: configuration.server, handler: router, logger: logger)
        } catch {
            loop.shutdown()
            store.close()
            throw error
        }
        self.store = store
        self.loop = loop
        self.coalescer = coalescer
        self.stage = stage
        self.batches = batches
        status.set { [coalescer, server, batches] in
            let counts = batches.counts
            return (coalescer.inFlightCount, server.suspendedConnections, batches.openStreams, counts.running, counts.kept)
        }
        logger.info("thumbd.started", metadata: [
            "server.listen": "\(configuration.server.listen)", "server.port": "\(server.port)",
            "store.path": "\(configuration.store.path)",
        ])
    }

    /// Graceful stop: no new connections; fetches in flight get the grace period to finish
    /// and answer their waiters; what is left is aborted (its waiters get 503); every
    /// suspended connection is resumed and answered; then the server stops and the database
    /// closes.
    public func shutdown() {
        logger.info("thumbd.stopping", metadata: ["fetch.inflight": "\(coalescer.inFlightCount)"])
        server.stopAccepting()
        batches.closeStreams()  // idle streams end now; busy ones at their next pause
        let deadline = ContinuousClock.now + .milliseconds(Int(configuration.server.shutdownGraceSeconds * 1000))
        while coalescer.inFlightCount > 0 && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.01)
        }
        loop.shutdown()
        stage.drain()  // the last completions answer their waiters
        if !server.waitUntilIdle(timeout: .seconds(5)) {
            logger.warning("thumbd.stopping with requests still open", metadata: ["server.suspended": "\(server.suspendedConnections)"])
        }
        server.stop()
        store.close()
        logger.info("thumbd.stopped")
    }
}

/// Lets `/stats` read parts that exist only once the server is up.
private final class StatusBox: Sendable {
    typealias Reader = @Sendable () -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int)
    private let reader = Mutex<Reader?>(nil)
    func set(_ read: @escaping Reader) { reader.withLock { $0 = read } }
    func read() -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int) {
        reader.withLock { $0 }?() ?? (0, 0, 0, 0, 0)
    }
}
