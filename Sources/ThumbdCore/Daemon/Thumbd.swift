import BlobStore
import Foundation
import HTTPServer
import Logging
import ServiceLifecycle
import Support
import Thumbnailer
import Synchronization
import Upstream

/// The daemon: `build()` checks the settings and makes its parts, which hold no file and run
/// no thread yet; each part is then a `DaemonService` (`services`), whose `run()` starts it
/// once the one before it has started and stops it on the group's graceful shutdown.
/// `thumbd serve` and `run()` run them in one `ServiceGroup`: they start in the order of that
/// list (the cache, the memory trimmer, the batches' keepalives, the resize lane, the transfer
/// loops, and last the HTTP servers' listening and the batches kept across a restart, so no
/// request reaches a part not started), and SIGTERM or SIGINT
/// stops them in reverse, every thread started included; a part that fails to start stops
/// the ones before it the same way. `start()` and `shutdown()` do the same on the caller's
/// thread (tests).
package final class Thumbd: Service, Sendable {
    package let configuration: ThumbdConfiguration
    let logger: Logger
    let phase = Mutex(Phase.created)

    enum Phase {
        case created
        case built(Parts)
        case stopped
    }

    /// What `build()` made: started and stopped by `services`.
    struct Parts: Sendable {
        let store: CacheStore
        let loop: TransferLoops
        let coalescer: FetchCoalescer
        let batches: BatchRegistry
        let stage: ProcessingStage
        let server: HTTPServer
        let variants: VariantSource
        /// What a reload changes in place (Thumbd+Reload).
        let live: LiveParts
        /// `/metrics` on its own address (`metrics.listen`), if configured.
        let metricsServer: HTTPServer?
        let lane: ResizeLane
        let freeMemory: FreeMemory
        let thumbnailer: Thumbnailer
        /// The parts as services, in start order (`services(…)`), and the order they keep.
        var services: [DaemonService] = []
        var order = StartOrder(count: 0)
    }

    /// How often the allocator's free memory goes back to the system (`FreeMemory`): a
    /// call takes a few milliseconds (README, "Memory").
    static let freeMemoryInterval = Duration.seconds(10)

    package init(configuration: ThumbdConfiguration, logger: Logger = Logger(label: "thumbd")) {
        self.configuration = configuration
        self.logger = logger
        applied = Mutex(configuration)
    }

    /// The settings in force: `configuration` and what reloads have applied since.
    let applied: Mutex<ThumbdConfiguration>

    private var parts: Parts {
        guard case .built(let parts) = phase.withLock({ $0 }) else { preconditionFailure("thumbd is not built") }
        return parts
    }

    var live: LiveParts { parts.live }

    /// Once every part has started, until `shutdown()` or the group's end.
    package var isRunning: Bool {
        if case .built(let parts) = phase.withLock({ $0 }) { return parts.order.complete }
        return false
    }

    /// Waits until every part has started (true), or the start was given up: a part failed
    /// to start, or a shutdown came first (false). "listening" is said after it.
    package func started() async -> Bool {
        guard case .built(let parts) = phase.withLock({ $0 }) else { return false }
        return await parts.order.allStarted()
    }

    /// The port the server listens on (the configured one, or the one picked for port 0).
    package var port: UInt16 { parts.server.port }

    /// The cache (tests look inside it).
    package var store: CacheStore { parts.store }

    /// Requests currently waiting for a fetch (their connections are suspended).
    package var waitingRequests: Int { parts.server.suspendedConnections }

    /// Distinct fetches in flight (queued or running).
    package var fetchesInFlight: Int { parts.coalescer.inFlightCount }

    /// Memory held by finished batches kept for their retention.
    package var keptBatchBytes: Int { parts.batches.keptFinishedBytes }

    /// Thumbnails made (resizes run) since start.
    package var thumbnailsMade: Int { parts.variants.resizes }

    /// Of those, the ones decoded while their original downloaded.
    package var thumbnailsStreamed: Int { parts.variants.streamed }

    /// Decodes of originals running while they download (each holds a stream slot).
    package var streamsRunning: Int { parts.variants.streams?.inUse ?? 0 }

    /// Resizes the lane has started since start, and those running now.
    package var resizesStarted: Int { parts.variants.lane.load.started }
    package var resizesRunning: Int { parts.variants.lane.load.running }

    /// The estimated memory of the decodes running now, against `thumbnails.maxMemoryBytes`.
    package var resizeMemoryInUse: Int { parts.variants.lane.load.memoryInUse }

    /// The highest the decodes' estimates have reached together since start.
    package var resizeMemoryPeak: Int { parts.variants.lane.peakEstimatedMemory }

    /// The port of `/metrics`'s own listener (`metrics.listen`), if there is one.
    package var metricsPort: UInt16? { parts.metricsServer?.port }

    /// Open `text/event-stream` responses.
    package var openEventStreams: Int { parts.batches.openStreams }

    /// Builds the parts, then starts them in order on the caller's thread, as the group's
    /// services would (tests; `thumbd serve` runs the services in a group). A part that fails
    /// to start stops the ones before it, in the order of a shutdown, and the error is thrown.
    package func start() throws {
        try build()
        guard case .built(let parts) = phase.withLock({ $0 }) else { return }
        for (index, service) in parts.services.enumerated() {
            do {
                try service.start()
            } catch {
                parts.order.abandon()
                for started in parts.services.reversed() { started.stop() }
                phase.withLock { $0 = .stopped }
                throw error
            }
            parts.order.started(index)
        }
    }

    /// Checks the settings and makes every part, holding no file and running no thread of
    /// its own; once. Throws `ConfigurationError` for a setting that cannot work.
    package func build() throws {
        guard case .created = phase.withLock({ $0 }) else { return }
        var parts = try makeParts()
        (parts.services, parts.order) = services(parts)
        let built = parts
        phase.withLock { $0 = .built(built) }
    }

    private func makeParts() throws -> Parts {
        let configuration = configuration
        var serverConfiguration = try configuration.server.httpServer()
        // Only the access log writes a request's target; metrics need its route only.
        serverConfiguration.keepsTargets = configuration.log.access
        let metricsListen = try configuration.metrics.listenAddress()
        let policy = DestinationPolicy(
            allowPrivateNetworks: configuration.upstream.allowPrivateNetworks,
            allowHosts: configuration.upstream.allowHosts)
        routeLibraryLog()
        // libvips starts before any thread of ours: its start writes the process environment
        // (VIPSHOME, `Thumbnailer`), and a setenv while another thread reads the environment
        // (libcurl's proxy variables, SQLite's temporary directory) can crash that reader.
        let thumbnailer: Thumbnailer
        do {
            thumbnailer = try Thumbnailer(configuration: configuration.thumbnails.thumbnailer)
        } catch {
            throw ThumbdError(error)
        }
        let store = CacheStore(configuration: configuration.store.blobStore, logger: logger)  // opened by its service
        let loop = TransferLoops(configuration: configuration.upstream.transferLoop(policy: policy),
                                 threads: configuration.upstream.threads, logger: logger)
        let coalescer = FetchCoalescer(abortWhenAbandoned: configuration.upstream.abortWhenAbandoned)
        let stage = ProcessingStage()
        let metrics = DaemonMetrics(storeCapacity: configuration.store.maxBytes)
        let source = ObjectSource(store: store, coalescer: coalescer, loop: loop, stage: stage, thumbnailer: thumbnailer,
                                  configuration: configuration, metrics: metrics, logger: logger)
        let lane = ResizeLane(configuration: configuration.thumbnails.lane)
        let variants = VariantSource(source: source, thumbnailer: thumbnailer, lane: lane,
                                     autoFormats: configuration.thumbnails.autoFormats,
                                     presets: configuration.thumbnails.presetRules,
                                     streams: configuration.thumbnails.streams, logger: logger)
        let signer = configuration.signing.signer
        let batches = BatchRegistry(configuration: configuration.batches, source: source, variants: variants, policy: policy,
                                    signer: signer)
        let status = StatusBox()
        let admin = AdminHandler(source: source, variants: variants, policy: policy, maxBytes: configuration.store.maxBytes) {
            status.read()
        }
        let serverBox = ServerBox()
        let metricsHandler = MetricsHandler(metrics: metrics) { [loop, store, batches, lane] in
            let counts = batches.counts
            let load = loop.load
            return DaemonMetrics.Snapshot(
                upstreamRunning: load.running, upstreamQueued: load.queued, downloads: loop.budget.usage, resizes: lane.load, store: store.statistics(),
                storeWriteFailures: store.writeFailures, eventStreams: batches.openStreams, batchesRunning: counts.running,
                requestsWaiting: serverBox.server?.suspendedConnections ?? 0)
        }
        let requestGuard = RequestGuard(listenHost: serverConfiguration.listen.host, allowedHosts: configuration.server.allowedHosts,
                                        allowedOrigins: configuration.server.allowedOrigins)
        let live = LiveParts(signer: signer, policy: policy, requestGuard: requestGuard, loops: loop)
        let router = Router(thumb: ThumbHandler(source: source, variants: variants, policy: policy, signer: signer),
                            batches: BatchHandler(registry: batches, maxItems: configuration.batches.maxItems),
                            admin: admin, health: {
            do {
                try store.probe()  // a read of the file itself, on a pooled connection
            } catch {
                return .unhealthy
            }
            if let failure = store.writeHealth {
                return .degraded("cache writes fail since \(failure.since.formatted(.iso8601)): \(failure.reason)")
            }
            return .ok
        }, requestGuard: requestGuard,
            metricsRoute: configuration.metrics.enabled && metricsListen == nil ? metricsHandler : nil,
            metrics: metrics,
            log: RequestLog(access: configuration.log.access ? Logger(label: "thumbd.access") : nil),
            page: GridPage.html(preset: configuration.thumbnails.pageAsks))
        let server = HTTPServer(configuration: serverConfiguration, handler: router, logger: logger)
        serverBox.set(server)
        var metricsConfiguration = HTTPServer.Configuration(listen: metricsListen ?? serverConfiguration.listen)
        metricsConfiguration.threads = 1
        metricsConfiguration.maxConnections = 64
        metricsConfiguration.serverHeader = "thumbd"
        metricsConfiguration.keepsTargets = false  // its handler records metrics only
        let metricsServer = metricsListen.map { _ in
            HTTPServer(configuration: metricsConfiguration, handler: metricsHandler, logger: logger)
        }
        status.set { [coalescer, server, batches] in
            let counts = batches.counts
            return (coalescer.inFlightCount, server.suspendedConnections, batches.openStreams, counts.running, counts.kept)
        }
        return Parts(store: store, loop: loop, coalescer: coalescer, batches: batches, stage: stage, server: server,
                     variants: variants, live: live, metricsServer: metricsServer, lane: lane,
                     freeMemory: FreeMemory(every: Self.freeMemoryInterval), thumbnailer: thumbnailer)
    }

    /// `build()` from async code (`thumbd serve`, `run()`): libvips loads its modules from
    /// disk, so not on the cooperative pool, which other tasks need meanwhile.
    package func buildOffThePool() async throws {
        try await DaemonService.offThePool { [self] in try build() }
    }

    /// The daemon's parts as services, in the order they start (and, reversed, stop); empty
    /// before `build()`.
    package var services: [DaemonService] {
        guard case .built(let parts) = phase.withLock({ $0 }) else { return [] }
        return parts.services
    }
}

/// Lets `/metrics` read the server, which is made after its handler.
private final class ServerBox: Sendable {
    private let box = Mutex<HTTPServer?>(nil)
    func set(_ server: HTTPServer) { box.withLock { $0 = server } }
    var server: HTTPServer? { box.withLock { $0 } }
}

/// Lets `/stats` read parts that exist only once the server is up.
private final class StatusBox: Sendable {
    typealias Reader = @Sendable () -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int)
    private let reader = Slot<Reader>()
    func set(_ read: @escaping Reader) { reader.set(read) }
    func read() -> (fetches: Int, waiting: Int, streams: Int, running: Int, kept: Int) {
        reader.value?() ?? (0, 0, 0, 0, 0)
    }
}
