import BlobStore
import HTTPServer
import Support
import Upstream

extension Thumbd {
    /// The running parts as services, listed in the order they started: the group stops
    /// them in reverse, each once the one after it has returned. Read from the bottom, the
    /// graceful shutdown:
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
    func services(store: CacheStore, freeMemory: FreeMemory, batches: BatchRegistry, server: HTTPServer,
                  metricsServer: HTTPServer?, stage: ProcessingStage, variants: VariantSource, loop: TransferLoops,
                  coalescer: FetchCoalescer) -> [DaemonService] {
        let logger = self.logger
        let grace = Duration.milliseconds(Int(configuration.server.shutdownGraceSeconds * 1000))
        return [
            DaemonService("store") {
                store.close()
                logger.info("thumbd.stopped")
            },
            DaemonService("memory trimmer") { freeMemory.stop() },
            DaemonService("event delivery") { batches.stop() },
            DaemonService("http servers") {
                if !server.waitUntilIdle(timeout: .seconds(5)) {
                    logger.warning("thumbd.stopping with requests still open",
                                   metadata: ["server.suspended": "\(server.suspendedConnections)"])
                }
                server.stop()
                metricsServer?.stop()
            },
            DaemonService("event streams") { batches.closeStreams() },
            DaemonService("processing") {
                stage.drain()
                variants.lane.stop()
                variants.stop()
                stage.drain()
            },
            DaemonService("transfers") { loop.shutdown() },
            DaemonService("intake") {
                logger.info("thumbd.stopping", metadata: ["fetch.inflight": "\(coalescer.inFlightCount)"])
                server.stopAccepting()
                _ = coalescer.waitUntilIdle(timeout: grace)
                batches.stopRecording()
            },
        ]
    }
}
