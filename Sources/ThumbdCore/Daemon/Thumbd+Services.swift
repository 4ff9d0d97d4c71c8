import BlobStore
import HTTPServer
import Logging
import Support
import Upstream

extension Thumbd {
    /// The parts `start()` has started so far; nil for one not started yet. A start that
    /// fails part way stops what it holds through the same services as a shutdown.
    struct StartedParts {
        var store: CacheStore?
        var loop: TransferLoops?
        var coalescer: FetchCoalescer?
        var stage: ProcessingStage?
        var lane: ResizeLane?
        var variants: VariantSource?
        var batches: BatchRegistry?
        var server: HTTPServer?
        var metricsServer: HTTPServer?
        var freeMemory: FreeMemory?
    }

    /// The running parts as services, listed in dependency order: the group stops them in
    /// reverse, each once the one after it has returned, and a start that fails part way
    /// stops the ones it had started in that same order (`stopStarted`). Only the services
    /// whose parts have started are listed. Read from the bottom, the graceful shutdown:
    /// 1. intake: new connections and new suspensions get 503 `shutting_down`; fetches in
    ///    flight get `server.shutdownGraceSeconds` to finish; the batches' journals stop
    ///    recording (what the shutdown cuts short is made again after the restart);
    /// 2. transfers: the loops abort what is left (their waiters get 503) and exit;
    /// 3. processing: the stage drains (the last completions answer their waiters), the
    ///    resize lane stops (queued resizes answered 503, running ones stopped), the parked
    ///    ones are answered, and the stage drains again;
    /// 4. event streams: each ends after the events it has not read yet;
    /// 5. HTTP servers: once every answer is out (libmicrohttpd must not stop while a
    ///    connection is suspended);
    /// 6. event delivery: its lanes;
    /// 7. memory trimmer;
    /// 8. store: access times flushed, the WAL checkpointed, SQLite closed.
    func services(_ parts: StartedParts) -> [DaemonService] {
        let logger = self.logger
        let grace = Duration.milliseconds(Int(configuration.server.shutdownGraceSeconds * 1000))
        var services: [DaemonService] = []
        func add(_ name: String, _ stop: @escaping @Sendable () -> Void) {
            services.append(DaemonService(name, logger: logger, stop: stop))
        }
        if let store = parts.store {
            add("store") {
                store.close()
                logger.info("thumbd.stopped")
            }
        }
        if let freeMemory = parts.freeMemory { add("memory trimmer") { freeMemory.stop() } }
        if let batches = parts.batches { add("event delivery") { batches.stop() } }
        if let server = parts.server {
            let metricsServer = parts.metricsServer
            add("http servers") {
                if !server.waitUntilIdle(timeout: .seconds(5)) {
                    logger.warning("thumbd.stopping with requests still open",
                                   metadata: ["server.suspended": "\(server.suspendedConnections)"])
                }
                server.stop()
                metricsServer?.stop()
            }
        }
        // A client may open a stream once the server listens: closed before the server stops.
        if let batches = parts.batches { add("event streams") { batches.closeStreams() } }
        if let stage = parts.stage {
            let (lane, variants) = (parts.lane, parts.variants)
            add("processing") {
                stage.drain()
                lane?.stop()
                variants?.stop()
                stage.drain()
            }
        }
        if let loop = parts.loop { add("transfers") { loop.shutdown() } }
        if let server = parts.server, let coalescer = parts.coalescer, let batches = parts.batches {
            add("intake") {
                logger.info("thumbd.stopping", metadata: ["fetch.inflight": "\(coalescer.inFlightCount)"])
                server.stopAccepting()
                _ = coalescer.waitUntilIdle(timeout: grace)
                batches.stopRecording()
            }
        }
        return services
    }

    /// A start failed: stops the parts it had started, as a graceful shutdown would.
    func stopStarted(_ parts: StartedParts) {
        for service in services(parts).reversed() { service.stop() }
    }
}
