import BlobStore
import CoreMetrics
import Foundation
import HTTPServer
import Prometheus
import Support
import Synchronization
import Upstream

/// What `GET /metrics` shows, in Prometheus's text format. Counters and histograms are
/// swift-metrics instruments made by a swift-prometheus factory that belongs to this daemon
/// (not the process-wide `MetricsSystem`, so several daemons in one test process keep
/// their own numbers). Levels that something else already keeps — the store's totals, the
/// transfer loop's queue, open streams, memory, files — are read when scraped.
///
/// Names follow Prometheus's conventions: `thumbd_` prefix, `_total` for counters,
/// `_seconds` and `_bytes` for units; labels have small fixed sets of values (a route,
/// not a path; an error code, not a message).
final class DaemonMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    /// Per route and status (100–599), made on first use: an index, not a hash, per request.
    private let requests = Mutex<[CoreMetrics.Counter?]>(Array(repeating: nil, count: DaemonMetrics.routes.count * 500))
    private let cacheResults: [CoreMetrics.Counter]  // CacheResult.allCases order
    private let upstreamErrors = Mutex<[String: CoreMetrics.Counter]>([:])
    private let clientErrors = Mutex<[String: CoreMetrics.Counter]>([:])
    private let fetchDuration: CoreMetrics.Timer
    private let fetchBytes: CoreMetrics.Counter
    private let fetches: [FetchOutcome: CoreMetrics.Counter]
    private let thumbnails: CoreMetrics.Counter
    private let evictions: CoreMetrics.Counter
    private let writeFailures: CoreMetrics.Counter
    private let levels: [Level: CoreMetrics.Gauge]
    /// The store's cumulative counts at the last scrape (its counters are fed the difference).
    private let lastStoreCounts = Mutex((evictions: 0, writeFailures: 0))

    static let routes = ["/thumb", "/batches", "/batches/{id}", "/batches/{id}/events", "/stats", "/cache", "/healthz",
                         "/metrics", "/", "other"]

    enum FetchOutcome: String, CaseIterable {
        case downloaded, notModified = "not_modified", failed
    }

    private enum Level: String, CaseIterable {
        case upstreamInFlight = "thumbd_upstream_in_flight"
        case upstreamQueued = "thumbd_upstream_queued"
        case resizesRunning = "thumbd_resizes_running"
        case resizesQueued = "thumbd_resizes_queued"
        case resizeMemory = "thumbd_resize_memory_bytes"
        case storeObjects = "thumbd_store_objects"
        case storeBytes = "thumbd_store_bytes"
        case eventStreams = "thumbd_event_streams_open"
        case batchesRunning = "thumbd_batches_running"
        case requestsWaiting = "thumbd_requests_waiting"
        case residentMemory = "process_resident_memory_bytes"
        case openFiles = "process_open_fds"
    }

    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Fetches: from a loopback hit of a few ms to the 30 s timeout.
        factory.durationHistogramBuckets["thumbd_upstream_fetch_duration_seconds"] = [
            .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
            .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
        ]
        self.factory = factory
        cacheResults = CacheResult.allCases.map {
            CoreMetrics.Counter(label: "thumbd_cache_results_total", dimensions: [("result", $0.rawValue)], factory: factory)
        }
        fetches = Dictionary(uniqueKeysWithValues: FetchOutcome.allCases.map {
            ($0, CoreMetrics.Counter(label: "thumbd_upstream_fetches_total", dimensions: [("outcome", $0.rawValue)], factory: factory))
        })
        fetchDuration = CoreMetrics.Timer(label: "thumbd_upstream_fetch_duration_seconds", factory: factory)
        fetchBytes = CoreMetrics.Counter(label: "thumbd_upstream_received_bytes_total", factory: factory)
        thumbnails = CoreMetrics.Counter(label: "thumbd_thumbnails_made_total", factory: factory)
        evictions = CoreMetrics.Counter(label: "thumbd_store_evictions_total", factory: factory)
        writeFailures = CoreMetrics.Counter(label: "thumbd_store_write_failures_total", factory: factory)
        levels = Dictionary(uniqueKeysWithValues: Level.allCases.map {
            ($0, CoreMetrics.Gauge(label: $0.rawValue, factory: factory))
        })
    }

    // MARK: Recording (any thread)

    /// One finished request: by route and status, and a client's mistake
    /// (a 4xx thumbd itself answered) by error code.
    func record(_ exchange: Exchange) {
        let route = Self.route(of: exchange.path)
        let status = (100...599).contains(exchange.status) ? exchange.status : 599
        let slot = route * 500 + status - 100
        let counter = requests.withLock { counters in
            if let known = counters[slot] { return known }
            let made = CoreMetrics.Counter(
                label: "thumbd_http_requests_total",
                dimensions: [("route", Self.routes[route]), ("status", String(status))], factory: factory)
            counters[slot] = made
            return made
        }
        // No per-request histogram: its lock on every hit cost a visible share of hot-hit
        // throughput (the access log has each request's duration).
        counter.increment()
        if (400..<500).contains(exchange.status), let code = exchange.header("X-Thumbd-Error") {
            Self.counter(in: clientErrors, label: "thumbd_client_errors_total", code: code, factory: factory).increment()
        }
    }

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
            fetchDuration.recordNanoseconds(duration.nanoseconds)
            fetches[response.status == 304 ? .notModified : .downloaded]?.increment()
            fetchBytes.increment(by: Int64(response.body.count))
        case .failure(.cancelled), .failure(.shuttingDown):
            break  // nobody wanted it any more: not the origin's doing
        case .failure(let error):
            fetchDuration.recordNanoseconds(duration.nanoseconds)
            fetches[.failed]?.increment()
            let code = ThumbdError(error).code.rawValue
            Self.counter(in: upstreamErrors, label: "thumbd_upstream_errors_total", code: code, factory: factory).increment()
        }
    }

    func thumbnailMade() { thumbnails.increment() }

    // MARK: Scrape

    /// The levels read now.
    struct Snapshot {
        var upstreamRunning: Int
        var upstreamQueued: Int
        var resizes = ResizeLane.Load(running: 0, queued: 0, memoryInUse: 0, started: 0)
        var store: CacheStore.Statistics
        var storeWriteFailures: Int
        var eventStreams: Int
        var batchesRunning: Int
        var requestsWaiting: Int
    }

    /// The text format, with the levels of `snapshot` and of the process.
    func exposition(_ snapshot: Snapshot) -> [UInt8] {
        levels[.upstreamInFlight]?.record(snapshot.upstreamRunning)
        levels[.upstreamQueued]?.record(snapshot.upstreamQueued)
        levels[.resizesRunning]?.record(snapshot.resizes.running)
        levels[.resizesQueued]?.record(snapshot.resizes.queued)
        levels[.resizeMemory]?.record(snapshot.resizes.memoryInUse)
        levels[.storeObjects]?.record(snapshot.store.objects)
        levels[.storeBytes]?.record(snapshot.store.bytes)
        levels[.eventStreams]?.record(snapshot.eventStreams)
        levels[.batchesRunning]?.record(snapshot.batchesRunning)
        levels[.requestsWaiting]?.record(snapshot.requestsWaiting)
        levels[.residentMemory]?.record(Self.residentBytes())
        levels[.openFiles]?.record(Self.openFiles())
        let (newEvictions, newFailures) = lastStoreCounts.withLock { last in
            defer { last = (snapshot.store.evictions, snapshot.storeWriteFailures) }
            return (snapshot.store.evictions - last.evictions, snapshot.storeWriteFailures - last.writeFailures)
        }
        if newEvictions > 0 { evictions.increment(by: Int64(newEvictions)) }
        if newFailures > 0 { writeFailures.increment(by: Int64(newFailures)) }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 << 10)
        registry.emit(into: &buffer)
        return buffer
    }

    // MARK: Helpers

    /// The route a path belongs to: a small fixed set, so a scan of random paths cannot
    /// grow the label space.
    static func route(of path: String) -> Int {
        switch path {
        case "/thumb": 0
        case "/batches": 1
        case "/stats": 4
        case "/cache": 5
        case "/healthz": 6
        case "/metrics": 7
        case "/": 8
        default: path.hasPrefix("/batches/") ? (path.hasSuffix("/events") ? 3 : 2) : 9
        }
    }

    private static func counter(in table: borrowing Mutex<[String: CoreMetrics.Counter]>, label: String, code: String,
                                factory: PrometheusMetricsFactory) -> CoreMetrics.Counter {
        table.withLock { counters in
            if let known = counters[code] { return known }
            let made = CoreMetrics.Counter(label: label, dimensions: [("code", code)], factory: factory)
            counters[code] = made
            return made
        }
    }

    /// Resident set size from `/proc/self/statm` (pages × page size).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * sysconf(Int32(_SC_PAGESIZE))
    }

    /// Open file descriptors: the entries of `/proc/self/fd`.
    static func openFiles() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
    }
}
