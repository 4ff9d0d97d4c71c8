import Prometheus
import Support
import Synchronization

/// What every answer records, its route and status and its duration by route, in atomic
/// cells, rendered into the text format when `/metrics` is scraped. Recording an answer
/// takes no lock and makes nothing: one atomic add for its status, and for its duration a
/// binary search of the bounds and two atomic adds (swift-prometheus's `Histogram` takes a
/// lock and walks every bucket on each record, and its counters per route and status were
/// found through a locked table).
///
/// The cells are fixed-size arrays of atomics (`InlineArray`): 10 routes × 500 statuses and
/// 10 routes × 18 buckets, 41 KB in all.
final class AnswerCounts: Sendable {
    private static let statuses = 500  // 100...599
    private let answers: InlineArray<5000, Atomic<Int>>
    /// Per route, the count of durations in each bucket (not cumulative), the last one `+Inf`.
    private let durations: InlineArray<180, Atomic<Int>>
    private let sums: InlineArray<10, Atomic<Int>>  // nanoseconds
    /// The buckets' upper bounds, in nanoseconds, ascending.
    private let bounds: [Int64]
    private let boundTexts: [String]
    private let routes: [String]

    init(routes: [String], buckets: [Duration]) {
        precondition(routes.count * Self.statuses == 5000 && routes.count * (buckets.count + 1) == 180 && routes.count == 10,
                     "the cells are sized for 10 routes and 17 buckets")
        self.routes = routes
        bounds = buckets.map { Int64($0.components.seconds) * 1_000_000_000 + $0.components.attoseconds / 1_000_000_000 }
        boundTexts = buckets.map(\.bucketRepresentation)
        answers = InlineArray { _ in Atomic(0) }
        durations = InlineArray { _ in Atomic(0) }
        sums = InlineArray { _ in Atomic(0) }
    }

    /// One answer: `route` in 0..<10, `status` in 100...599 (the caller clamps them).
    func record(route: Int, status: Int, duration: Duration) {
        answers[route * Self.statuses + status - 100].wrappingAdd(1, ordering: .relaxed)
        let nanoseconds = max(0, duration.nanoseconds)  // `components` once, not twice
        durations[route * (bounds.count + 1) + bucket(of: nanoseconds)].wrappingAdd(1, ordering: .relaxed)
        sums[route].wrappingAdd(Int(nanoseconds), ordering: .relaxed)
    }

    /// The first bucket whose bound is at or above `nanoseconds` (`bounds.count`: `+Inf`).
    func bucket(of nanoseconds: Int64) -> Int {
        var low = 0
        var high = bounds.count
        while low < high {
            let middle = (low + high) / 2
            if bounds[middle] >= nanoseconds { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// `thumbd_http_requests_total` (the route and status pairs seen) and
    /// `thumbd_http_request_duration_seconds` (every route), in the text format.
    func emit(into buffer: inout [UInt8]) {
        var text = "# HELP thumbd_http_requests_total Requests answered, by route and status.\n"
        text += "# TYPE thumbd_http_requests_total counter\n"
        for route in routes.indices {
            for status in 100...599 {
                let count = answers[route * Self.statuses + status - 100].load(ordering: .relaxed)
                if count > 0 {
                    text += "thumbd_http_requests_total{route=\"\(routes[route])\",status=\"\(status)\"} \(count)\n"
                }
            }
        }
        text += "# HELP thumbd_http_request_duration_seconds Time from a request's arrival until its answer was sent, "
            + "by route (an event stream: until it closed).\n"
        text += "# TYPE thumbd_http_request_duration_seconds histogram\n"
        for route in routes.indices {
            let label = "route=\"\(routes[route])\""
            var cumulative = 0
            for bucket in 0...bounds.count {
                cumulative += durations[route * (bounds.count + 1) + bucket].load(ordering: .relaxed)
                let bound = bucket < bounds.count ? boundTexts[bucket] : "+Inf"
                text += "thumbd_http_request_duration_seconds_bucket{\(label),le=\"\(bound)\"} \(cumulative)\n"
            }
            let sum = Duration.nanoseconds(sums[route].load(ordering: .relaxed)).bucketRepresentation
            text += "thumbd_http_request_duration_seconds_sum{\(label)} \(sum)\n"
            text += "thumbd_http_request_duration_seconds_count{\(label)} \(cumulative)\n"
        }
        buffer.append(contentsOf: text.utf8)
    }
}
