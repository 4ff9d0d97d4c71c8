import BlobStore
import Foundation
import HTTPServer
import Prometheus
import Support
import Synchronization
import Upstream

/// What the metrics read besides their own counters: the route of a path, the process's memory and files.
extension DaemonMetrics {
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

    static func counter(in table: borrowing Mutex<[String: Prometheus.Counter]>, registry: PrometheusCollectorRegistry,
                                name: String, code: String, help: String) -> Prometheus.Counter {
        table.withLock { counters in
            if let known = counters[code] { return known }
            let made = registry.counter(name, labels: [("code", code)], help: help)
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
