import BlobStore
import Foundation
import HTTPServer
import Prometheus
import Support
import Synchronization
import Upstream

/// What `GET /metrics` shows, in Prometheus's text format: a swift-prometheus registry
/// that belongs to this daemon (not a process-wide one, so several daemons in one test
/// process keep their own numbers), each family made with its `# HELP` text. Levels that
/// something else already keeps — the store's totals, the transfer loop's queue, open
/// streams, memory, files, CPU — are read when scraped.
///
/// Names follow Prometheus's conventions: `thumbd_` prefix, `_total` for counters,
/// `_seconds` and `_bytes` for units; labels have small fixed sets of values (a route,
/// not a path; an error code, not a message).
final class DaemonMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()

    /// Per route and status, and per route how long a request took from its first byte to
    /// its answer sent: recorded on every answer, without a lock.
    private let answers = AnswerCounts(routes: DaemonMetrics.routes, buckets: DaemonMetrics.requestBuckets)
    private let cacheResults: [Prometheus.Counter]  // CacheResult.allCases order
    private let upstreamErrors = Mutex<[String: Prometheus.Counter]>([:])
    private let clientErrors = Mutex<[String: Prometheus.Counter]>([:])
    private let fetchDuration: DurationHistogram
    private let resizeDuration: DurationHistogram
    private let fetchBytes: Prometheus.Counter
    private let fetches: [FetchOutcome: Prometheus.Counter]
    private let thumbnails: Prometheus.Counter
    private let evictions: Prometheus.Counter
    private let writeFailures: Prometheus.Counter
    private let cpuSeconds: Prometheus.Counter
    private let levels: [Level: Prometheus.Gauge]
    /// The cumulative counts at the last scrape (their counters are fed the difference).
    private let lastCounts = Mutex((evictions: 0, writeFailures: 0, cpuSeconds: 0.0))

    static let routes = ["/thumb", "/batches", "/batches/{id}", "/batches/{id}/events", "/stats", "/cache", "/healthz",
                         "/metrics", "/", "other"]

    enum FetchOutcome: String, CaseIterable {
        case downloaded, notModified = "not_modified", failed
    }

    private enum Level: String, CaseIterable {
        case upstreamInFlight = "thumbd_upstream_in_flight"
        case upstreamQueued = "thumbd_upstream_queued"
        case upstreamBuffered = "thumbd_upstream_buffered_bytes"
        case upstreamWaitingForMemory = "thumbd_upstream_waiting_for_memory"
        case resizesRunning = "thumbd_resizes_running"
        case resizesQueued = "thumbd_resizes_queued"
        case resizeMemory = "thumbd_resize_memory_bytes"
        case storeObjects = "thumbd_store_objects"
        case storeBytes = "thumbd_store_bytes"
        case storeCapacity = "thumbd_store_capacity_bytes"
        case eventStreams = "thumbd_event_streams_open"
        case batchesRunning = "thumbd_batches_running"
        case requestsWaiting = "thumbd_requests_waiting"
        case residentMemory = "process_resident_memory_bytes"
        case openFiles = "process_open_fds"
        case maxFiles = "process_max_fds"
        case startTime = "process_start_time_seconds"

        var help: String {
            switch self {
            case .upstreamInFlight: "Origin transfers running now."
            case .upstreamQueued: "Origin fetches waiting for a transfer slot."
            case .upstreamBuffered: "Memory downloaded bodies hold now, until freed (upstream.maxBufferedBytes)."
            case .upstreamWaitingForMemory: "Origin transfers paused until downloaded bodies give memory back."
            case .resizesRunning: "Resizes running in the resize lane."
            case .resizesQueued: "Resizes waiting for a worker of the resize lane."
            case .resizeMemory: "Memory the running resizes hold by their estimates."
            case .storeObjects: "Objects in the cache (originals, variants, negative answers)."
            case .storeBytes: "Bytes of the cached bodies."
            case .storeCapacity: "The cache's size limit (store.maxBytes); past it the least recently used objects go."
            case .eventStreams: "Open Server-Sent Events streams."
            case .batchesRunning: "Batches with items not finished."
            case .requestsWaiting: "Requests suspended until their fetch or resize ends."
            case .residentMemory: "Resident memory size in bytes."
            case .openFiles: "Number of open file descriptors."
            case .maxFiles: "Maximum number of open file descriptors."
            case .startTime: "Start time of the process since unix epoch in seconds."
            }
        }
    }

    /// A request on loopback takes from tens of microseconds (a hit) to the fetch timeout.
    static let requestBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2500) / 1000,
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
    ]

    init(storeCapacity: Int64 = 0) {
        let registry = registry
        cacheResults = CacheResult.allCases.map {
            registry.counter("thumbd_cache_results_total", labels: [("result", $0.rawValue)],
                                 help: "How /thumb requests were served: hit, miss, coalesced, stale, revalidated.")
        }
        fetches = Dictionary(uniqueKeysWithValues: FetchOutcome.allCases.map {
            ($0, registry.counter("thumbd_upstream_fetches_total", labels: [("outcome", $0.rawValue)],
                                      help: "Origin fetches by outcome: downloaded, not_modified (a 304), failed."))
        })
        // Fetches: from a loopback hit of a few ms to the 30 s timeout.
        fetchDuration = registry.histogram(
            "thumbd_upstream_fetch_duration_seconds",
            buckets: [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
                      .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10),
                      .seconds(30)],
            help: "Time an origin fetch took, from its start to its last byte or its failure.")
        // Resizes: a small JPEG tile in a few ms, up to the time limit (10 s by default).
        resizeDuration = registry.histogram(
            "thumbd_resize_duration_seconds",
            buckets: [.milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
                      .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500),
                      .seconds(5), .seconds(10)],
            help: "Time one resize took in the lane: decode, resize, encode.")
        fetchBytes = registry.counter("thumbd_upstream_received_bytes_total", help: "Body bytes received from origins.")
        thumbnails = registry.counter("thumbd_thumbnails_made_total", help: "Thumbnails made (resized and encoded).")
        evictions = registry.counter("thumbd_store_evictions_total",
                                         help: "Objects evicted from the cache to keep it within store.maxBytes.")
        writeFailures = registry.counter("thumbd_store_write_failures_total",
                                             help: "Cache writes that failed (a full disk, an I/O error).")
        cpuSeconds = registry.counter("process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.")
        levels = Dictionary(uniqueKeysWithValues: Level.allCases.map {
            ($0, registry.gauge($0.rawValue, help: $0.help))
        })
        let info = registry.gauge(
            "thumbd_build_info", labels: [("version", BuildInfo.version)] + BuildInfo.libraries.map { ($0.name, $0.version) },
            help: "Always 1: the release and the C libraries this process runs on, as labels.")
        info.set(1.0)
        levels[.storeCapacity]?.set(Double(storeCapacity))
        levels[.maxFiles]?.set(Double(ProcessStatistics.maxOpenFiles()))
        levels[.startTime]?.set(ProcessStatistics.startTime())
    }

    // MARK: Recording (any thread)

    /// One finished request: by route and status, its duration by route, and a client's
    /// mistake (a 4xx thumbd itself answered, not an origin's 404 or 410) by error code.
    func record(_ exchange: Exchange) {
        let route = (0..<Self.routes.count).contains(exchange.route) ? exchange.route : Self.route(of: "")
        let status = (100...599).contains(exchange.status) ? exchange.status : 599
        answers.record(route: route, status: status, duration: exchange.duration())
        if (400..<500).contains(exchange.status), let code = exchange.header("X-Thumbd-Error"),
           !Self.upstreamCodes.contains(code) {
            Self.counter(in: clientErrors, registry: registry, name: "thumbd_client_errors_total", code: code,
                         help: "4xx answers that were the client's mistake, by error code (an origin's 404 or 410 is not).")
                .increment()
        }
    }

    /// The 4xx codes that repeat an origin's answer: counted as upstream errors only.
    static let upstreamCodes: Set<String> = [ErrorCode.upstreamNotFound.rawValue, ErrorCode.upstreamGone.rawValue]

    func count(_ result: CacheResult) {
        let index = switch result {
        case .hit: 0
        case .miss: 1
        case .coalesced: 2
        case .stale: 3
        case .revalidated: 4
        }
        cacheResults[index].increment()
    }

    /// One upstream fetch ended.
    func fetched(_ result: Result<UpstreamResponse, UpstreamError>, duration: Duration) {
        switch result {
        case .success(let response):
            fetchDuration.record(duration)
            fetches[response.status == 304 ? .notModified : .downloaded]?.increment()
            fetchBytes.increment(by: Int64(response.body.count))
            // An origin's 404 and 410 are remembered answers, and upstream errors as well.
            if let code = [404: ErrorCode.upstreamNotFound, 410: .upstreamGone][response.status] {
                Self.counter(in: upstreamErrors, registry: registry, name: "thumbd_upstream_errors_total", code: code.rawValue,
                             help: Self.upstreamErrorsHelp).increment()
            }
        case .failure(.cancelled), .failure(.shuttingDown):
            break  // nobody wanted it any more: not the origin's doing
        case .failure(let error):
            fetchDuration.record(duration)
            fetches[.failed]?.increment()
            let code = ThumbdError(error).code.rawValue
            Self.counter(in: upstreamErrors, registry: registry, name: "thumbd_upstream_errors_total", code: code,
                         help: Self.upstreamErrorsHelp).increment()
        }
    }

    private static let upstreamErrorsHelp = "Origin fetches that failed or answered 404/410, by error code."

    func thumbnailMade(duration: Duration) {
        thumbnails.increment()
        resizeDuration.record(duration)
    }

    // MARK: Scrape

    /// The levels read now.
    struct Snapshot {
        var upstreamRunning: Int
        var upstreamQueued: Int
        var downloads = DownloadBudget.Usage(held: 0, peak: 0, paused: 0)
        var resizes = ResizeLane.Load(running: 0, queued: 0, memoryInUse: 0, started: 0)
        var store: CacheStore.Statistics
        var storeWriteFailures: Int
        var eventStreams: Int
        var batchesRunning: Int
        var requestsWaiting: Int
    }

    /// The text format, with the levels of `snapshot` and of the process.
    func exposition(_ snapshot: Snapshot) -> [UInt8] {
        levels[.upstreamInFlight]?.set(Int64(snapshot.upstreamRunning))
        levels[.upstreamQueued]?.set(Int64(snapshot.upstreamQueued))
        levels[.upstreamBuffered]?.set(Int64(snapshot.downloads.held))
        levels[.upstreamWaitingForMemory]?.set(Int64(snapshot.downloads.paused))
        levels[.resizesRunning]?.set(Int64(snapshot.resizes.running))
        levels[.resizesQueued]?.set(Int64(snapshot.resizes.queued))
        levels[.resizeMemory]?.set(Int64(snapshot.resizes.memoryInUse))
        levels[.storeObjects]?.set(Int64(snapshot.store.objects))
        levels[.storeBytes]?.set(Int64(snapshot.store.bytes))
        levels[.eventStreams]?.set(Int64(snapshot.eventStreams))
        levels[.batchesRunning]?.set(Int64(snapshot.batchesRunning))
        levels[.requestsWaiting]?.set(Int64(snapshot.requestsWaiting))
        levels[.residentMemory]?.set(Int64(Self.residentBytes()))
        levels[.openFiles]?.set(Int64(Self.openFiles()))
        let cpu = ProcessStatistics.cpuSeconds()
        let (newEvictions, newFailures, newCPU) = lastCounts.withLock { last in
            defer { last = (snapshot.store.evictions, snapshot.storeWriteFailures, max(last.cpuSeconds, cpu)) }
            return (snapshot.store.evictions - last.evictions, snapshot.storeWriteFailures - last.writeFailures,
                    max(0, cpu - last.cpuSeconds))
        }
        if newEvictions > 0 { evictions.increment(by: Int64(newEvictions)) }
        if newFailures > 0 { writeFailures.increment(by: Int64(newFailures)) }
        if newCPU > 0 { cpuSeconds.increment(by: newCPU) }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(32 << 10)
        registry.emit(into: &buffer)
        answers.emit(into: &buffer)
        return buffer
    }

}
