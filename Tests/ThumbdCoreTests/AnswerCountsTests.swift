import Testing
@testable import ThumbdCore

/// The per-answer metrics, kept in atomic cells: each duration lands in the first bucket at
/// or above it, and the text is what swift-prometheus wrote for the same family.
@Suite("AnswerCounts")
struct AnswerCountsTests {
    static func counts() -> AnswerCounts {
        AnswerCounts(routes: DaemonMetrics.routes, buckets: DaemonMetrics.requestBuckets)
    }

    static func text(_ counts: AnswerCounts) -> String {
        var buffer: [UInt8] = []
        counts.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }

    @Test("a duration lands in the first bucket whose bound is at or above it")
    func buckets() {
        let counts = Self.counts()
        #expect(counts.bucket(of: 0) == 0)
        #expect(counts.bucket(of: 100_000) == 0)  // exactly 100 µs: le="0.0001"
        #expect(counts.bucket(of: 100_001) == 1)
        #expect(counts.bucket(of: 1_000_000) == 3)  // 1 ms
        #expect(counts.bucket(of: 30_000_000_000) == DaemonMetrics.requestBuckets.count - 1)
        #expect(counts.bucket(of: 30_000_000_001) == DaemonMetrics.requestBuckets.count)  // +Inf
    }

    @Test("answers are counted by route and status, and durations cumulate by bucket")
    func text() {
        let counts = Self.counts()
        counts.record(route: 0, status: 200, duration: .microseconds(50))
        counts.record(route: 0, status: 200, duration: .milliseconds(3))
        counts.record(route: 0, status: 404, duration: .seconds(60))
        counts.record(route: 6, status: 503, duration: .microseconds(200))
        let text = Self.text(counts)
        #expect(text.contains("thumbd_http_requests_total{route=\"/thumb\",status=\"200\"} 2\n"))
        #expect(text.contains("thumbd_http_requests_total{route=\"/thumb\",status=\"404\"} 1\n"))
        #expect(text.contains("thumbd_http_requests_total{route=\"/healthz\",status=\"503\"} 1\n"))
        #expect(!text.contains("status=\"201\""))  // only the pairs seen
        #expect(text.contains("thumbd_http_request_duration_seconds_bucket{route=\"/thumb\",le=\"0.0001\"} 1\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_bucket{route=\"/thumb\",le=\"0.005\"} 2\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_bucket{route=\"/thumb\",le=\"30.0\"} 2\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_bucket{route=\"/thumb\",le=\"+Inf\"} 3\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_count{route=\"/thumb\"} 3\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_sum{route=\"/thumb\"} 60.00305\n"))
        #expect(text.contains("thumbd_http_request_duration_seconds_count{route=\"/metrics\"} 0\n"))
        // One HELP and one TYPE line per family.
        #expect(text.components(separatedBy: "# TYPE thumbd_http_request_duration_seconds histogram").count == 2)
        #expect(text.components(separatedBy: "# TYPE thumbd_http_requests_total counter").count == 2)
    }

    @Test("records from many threads at once are all counted")
    func concurrent() async {
        let counts = Self.counts()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<1000 { counts.record(route: 0, status: 200, duration: .microseconds(10)) }
                }
            }
        }
        #expect(Self.text(counts).contains("thumbd_http_requests_total{route=\"/thumb\",status=\"200\"} 8000\n"))
    }
}
