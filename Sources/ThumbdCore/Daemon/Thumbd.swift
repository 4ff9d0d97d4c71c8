import BlobStore
import Foundation
import HTTPServer
import Logging
import ServiceLifecycle
import Support
import Thumbnailer
import Synchronization
import Upstream

/// The daemon: `start()` opens the cache and starts the transfer loops, the processing
/// stage, the resize lane, the batches' delivery and the HTTP servers, in that order (a
/// failure stops what had started through the same services as a shutdown). Each running part is then a
/// `DaemonService` (`services`), which `thumbd serve` runs in one `ServiceGroup`: SIGTERM or
/// SIGINT stops them in the reverse order of that list, every thread started included.
package final class Thumbd: Service, Sendable {
    package let configuration: ThumbdConfiguration
    let logger: Logger
    let phase = Mutex(Phase.created)

    enum Phase {
        case created
        case running(Parts)
        case stopped
    }

    /// What runs between start and stop.
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
        /// What stops them, in order (`services(…)`).
        let services: [DaemonService]
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
        guard case .running(let parts) = phase.withLock({ $0 }) else { preconditionFailure("thumbd is not running") }
        return parts
    }

    var live: LiveParts { parts.live }

    /// Between a successful `start()` and `shutdown()`.
    package var isRunning: Bool {
        if case .running = phase.withLock({ $0 }) { return true }
        return false
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

    /// Opens the cache, starts the transfer loops, the processing stage and the server. On
    /// failure whatever was started is stopped again.
    package func start() throws {
        guard case .created = phase.withLock({ $0 }) else { return }
        // Each part that starts threads or holds files is noted as it starts; a start that
        // fails part way (the port taken, a bad metrics address) stops those through their
        // services, in the order a shutdown stops them.
        var started = StartedParts()
        do {
            try start(started: &started)
        } catch {
            stopStarted(started)
            throw error
        }
    }

    private func start(started: inout StartedParts) throws {
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
        let store: CacheStore
        do {
            store = try CacheStore(configuration: configuration.store.blobStore, logger: logger)
        } catch let error as CacheStore.NewerSchema {
            // Not a fault of the file's but of this binary's age: a setting to change (the
            // file, or the version run), said as one (EX_CONFIG from `thumbd serve`).
            throw ConfigurationError(key: "store.path", reason: "\(configuration.store.path): \(error); run that thumbd or a newer one, or give this one another file (a cache: the new file fills again from the origins)")
        } catch {
            // What the operator can act on: the file, the setting that names it, the reason.
            throw ThumbdError(.storeUnavailable, "cannot use the cache file \(configuration.store.path) (store.path, --db): \(error)")
        }
        started.store = store
        let loop = TransferLoops(configuration: configuration.upstream.transferLoop(policy: policy),
                                 threads: configuration.upstream.threads, logger: logger)
        started.loop = loop
        let coalescer = FetchCoalescer(abortWhenAbandoned: configuration.upstream.abortWhenAbandoned)
        started.coalescer = coalescer
        let stage = ProcessingStage()
        started.stage = stage
        let metrics = DaemonMetrics(storeCapacity: configuration.store.maxBytes)
        let source = ObjectSource(store: store, coalescer: coalescer, loop: loop, stage: stage, thumbnailer: thumbnailer,
                                  configuration: configuration, metrics: metrics, logger: logger)
        let lane = ResizeLane(configuration: configuration.thumbnails.lane)
        started.lane = lane
        let variants = VariantSource(source: source, thumbnailer: thumbnailer, lane: lane,
                                     autoFormats: configuration.thumbnails.autoFormats,
                                     presets: configuration.thumbnails.presetRules,
                                     streams: configuration.thumbnails.streams, logger: logger)
        started.variants = variants
        let signer = configuration.signing.signer
        let batches = BatchRegistry(configuration: configuration.batches, source: source, variants: variants, policy: policy,
                                    signer: signer)
        started.batches = batches
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
        let server: HTTPServer
        let metricsServer: HTTPServer?
        do throws(HTTPServerError) {
            server = try HTTPServer(configuration: serverConfiguration, handler: router, logger: logger)
            started.server = server
            serverBox.set(server)
            var metricsConfiguration = HTTPServer.Configuration(listen: metricsListen ?? serverConfiguration.listen)
            metricsConfiguration.threads = 1
            metricsConfiguration.maxConnections = 64
            metricsConfiguration.serverHeader = "thumbd"
            metricsConfiguration.keepsTargets = false  // its handler records metrics only
            metricsServer = metricsListen == nil ? nil
                : try HTTPServer(configuration: metricsConfiguration, handler: metricsHandler, logger: logger)
            started.metricsServer = metricsServer
        } catch {
            throw ThumbdError(error)
        }
        status.set { [coalescer, server, batches] in
            let counts = batches.counts
            return (coalescer.inFlightCount, server.suspendedConnections, batches.openStreams, counts.running, counts.kept)
        }
        started.freeMemory = FreeMemory(every: Self.freeMemoryInterval)
        let services = services(started)
        phase.withLock {
            $0 = .running(Parts(store: store, loop: loop, coalescer: coalescer, batches: batches, stage: stage, server: server,
                                  variants: variants, live: live, metricsServer: metricsServer, services: services))
        }
        // Batches kept across the restart come back once the server runs: their unfinished
        // items start again, and their streams answer reconnecting clients.
        let journals: [Journal]
        do {
            journals = try store.loadJournals()
        } catch {
            logger.warning("batch.restore.failed", metadata: ["error": "\(error)"])
            journals = []
        }
        let restored = batches.restore(journals, logger: logger)
        logger.info("thumbd.started", metadata: [
            "server.listen": "\(configuration.server.listen)", "server.port": "\(server.port)",
            "store.path": "\(configuration.store.path)", "thumbnails.avif": "\(thumbnailer.canEncodeAVIF)",
            "batches.restored": "\(restored)",
        ])
        if !Thumbnailer.modulesRestricted {
            logger.warning("thumbnails.modules: libvips loaded every module of its own directory (no private module directory could be made under the temporary directory); loaders other than thumbd's stay blocked")
        }
    }

    /// `start()` from async code (`thumbd serve`, `run()`): starting opens files and starts
    /// threads, and waits for some, so not on the cooperative pool, which other tasks need
    /// meanwhile, nor on the global queue, whose few threads a busy process may hold (a serial
    /// queue of its own gets a thread whatever the load).
    package func startOffThePool() async throws {
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            DispatchQueue(label: "thumbd.start").async { [self] in
                do {
                    try start()
                    started.resume()
                } catch {
                    started.resume(throwing: error)
                }
            }
        }
    }

    /// The running daemon's parts as services, in the order they are stopped in reverse
    /// (see `services(…)`); empty before `start()`.
    package var services: [DaemonService] {
        guard case .running(let parts) = phase.withLock({ $0 }) else { return [] }
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
