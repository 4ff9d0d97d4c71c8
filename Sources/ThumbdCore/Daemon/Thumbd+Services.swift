import BlobStore
import HTTPServer
import Logging
import Support
import Thumbnailer
import Upstream

extension Thumbd {
    /// The parts as services, in the order they start; the group stops them in reverse, each
    /// once the one after it has returned, and a start that fails part way stops the ones
    /// before it in that same order. Each starts once the one before it has started:
    /// 1. store: the cache file opened (its lock taken, the writer started);
    /// 2. memory trimmer;
    /// 3. event keepalives: the timer that sends them (and forgets finished batches);
    /// 4. HTTP server: nothing to start (it listens from intake on); its stop is here: its
    ///    event loops, which write every client socket, event streams' included;
    /// 5. event streams (nothing to start);
    /// 6. processing: the resize lane's workers;
    /// 7. transfers: the loops' threads;
    /// 8. `/metrics`'s own server, if configured;
    /// 9. intake: the HTTP server listens, last, so that no request reaches a part that has
    ///    not started (nor one that a failed start or an early SIGTERM never starts); the
    ///    batches kept across a restart come back, "thumbd.started" is logged.
    ///
    /// Read from the bottom, the graceful shutdown:
    /// 1. intake: new connections and new suspensions get 503 `shutting_down`; fetches in
    ///    flight get `server.shutdownGraceSeconds` to finish; the batches' journals stop
    ///    recording (what the shutdown cuts short is made again after the restart);
    /// 2. `/metrics`'s own server;
    /// 3. transfers: the loops abort what is left (their waiters get 503) and exit;
    /// 4. processing: the stage drains (the last completions answer their waiters), the
    ///    resize lane stops (queued resizes answered 503, running ones stopped), the parked
    ///    ones are answered, and the stage drains again;
    /// 5. event streams: each ends after the events it has not read yet;
    /// 6. HTTP server: once every answer is out (libmicrohttpd must not stop while a
    ///    connection is suspended);
    /// 7. event keepalives: the timer;
    /// 8. memory trimmer;
    /// 9. store: access times flushed, the WAL checkpointed, SQLite closed.
    func services(_ parts: Parts) -> ([DaemonService], StartOrder) {
        let logger = self.logger
        let configuration = configuration
        let grace = Duration.milliseconds(Int(configuration.server.shutdownGraceSeconds * 1000))
        var steps: [(name: String, start: @Sendable () throws -> Void, stop: @Sendable () -> Void)] = []
        func add(_ name: String, start: @escaping @Sendable () throws -> Void, stop: @escaping @Sendable () -> Void) {
            steps.append((name, start, stop))
        }
        let (store, server, batches) = (parts.store, parts.server, parts.batches)
        add("store") {
            try Self.open(store, configuration)
        } stop: {
            store.close()
            logger.info("thumbd.stopped")
        }
        let freeMemory = parts.freeMemory
        add("memory trimmer", start: freeMemory.start, stop: freeMemory.stop)
        add("event keepalives", start: batches.start, stop: batches.stop)
        add("http server", start: {}) {
            if !server.waitUntilIdle(timeout: .seconds(5)) {
                logger.warning("thumbd.stopping with requests still open",
                               metadata: ["server.suspended": "\(server.suspendedConnections)"])
            }
            server.stop()
        }
        // A client may open a stream once the server listens: closed before the server stops.
        add("event streams", start: {}, stop: batches.closeStreams)
        let (stage, lane, variants) = (parts.stage, parts.lane, parts.variants)
        add("processing", start: lane.start) {
            stage.drain()
            lane.stop()
            variants.stop()
            stage.drain()
        }
        let loop = parts.loop
        add("transfers", start: loop.start, stop: loop.shutdown)
        if let metricsServer = parts.metricsServer {
            add("metrics server", start: { try Self.listen(metricsServer) }, stop: metricsServer.stop)
        }
        let coalescer = parts.coalescer
        let avif = parts.thumbnailer.canEncodeAVIF
        add("intake") {
            try Self.listen(server)
            // Batches kept across the restart come back once everything runs: their unfinished
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
                "store.path": "\(configuration.store.path)", "thumbnails.avif": "\(avif)",
                "batches.restored": "\(restored)",
            ])
            if !Thumbnailer.modulesRestricted {
                logger.warning("thumbnails.modules: libvips loaded every module of its own directory (no private module directory could be made under the temporary directory); loaders other than thumbd's stay blocked")
            }
            if Thumbnailer.losesIdleWorkerTasks {
                logger.warning("thumbnails.workers: this libvips 8.14 lets a worker that stops for being idle drop the task it was just given, and its idle wait could not be replaced (the executable does not export vips_semaphore_down_timeout); a resize may then never return")
            }
        } stop: {
            logger.info("thumbd.stopping", metadata: ["fetch.inflight": "\(coalescer.inFlightCount)"])
            server.stopAccepting()
            _ = coalescer.waitUntilIdle(timeout: grace)
            batches.stopRecording()
        }
        let order = StartOrder(count: steps.count)
        let services = steps.enumerated().map { index, step in
            DaemonService(step.name, index: index, order: order, logger: logger, start: step.start, stop: step.stop)
        }
        return (services, order)
    }

    /// Binds a server's address (the port taken: an error that says so).
    private static func listen(_ server: HTTPServer) throws {
        do throws(HTTPServerError) { try server.start() } catch { throw ThumbdError(error) }
    }

    /// Opens the cache file, saying what an operator can act on when it cannot be used.
    private static func open(_ store: CacheStore, _ configuration: ThumbdConfiguration) throws {
        do {
            try store.open()
        } catch let error as CacheStore.NewerSchema {
            // Not a fault of the file's but of this binary's age: a setting to change (the
            // file, or the version run), said as one (EX_CONFIG from `thumbd serve`).
            throw ConfigurationError(key: "store.path", reason: "\(configuration.store.path): \(error); run that thumbd or a newer one, or give this one another file (a cache: the new file fills again from the origins)")
        } catch {
            // What the operator can act on: the file, the setting that names it, the reason.
            throw ThumbdError(.storeUnavailable, "cannot use the cache file \(configuration.store.path) (store.path, --db): \(error)")
        }
    }
}
