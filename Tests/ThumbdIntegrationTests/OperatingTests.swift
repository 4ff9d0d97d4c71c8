import Foundation
import HTTPServer
import Testing
import ThumbdTesting
@testable import ThumbdCore

/// What an operator watches: `/metrics`, `X-Request-Id`, the access log's path.
@Suite("Metrics, request ids, access log")
struct OperatingTests {
    /// The exposition as `name{labels}` → value.
    private func scrape(_ port: UInt16) async throws -> [String: Double] {
        let result = try await request(port, "/metrics")
        #expect(result.status == 200)
        #expect(result[header: "Content-Type"] == "text/plain; version=0.0.4; charset=utf-8")
        var samples: [String: Double] = [:]
        for line in String(decoding: result.body, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Double(parts[1]) { samples[String(parts[0])] = value }
        }
        return samples
    }

    @Test("under a small upstream.maxBufferedBytes, large originals asked at once all arrive whole; the memory comes back")
    func downloadBudget() async throws {
        try await withOriginAndDaemon({ $0.upstream.maxBufferedBytes = 1 << 20 }) { origin, daemon in
            let sizes = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
                for index in 0..<8 {
                    group.addTask {
                        let result = try await request(daemon.port, origin.thumb("/big?size=700000&n=\(index)"))
                        return (result.status, result.body.count)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(sizes.count == 8 && sizes.allSatisfy { $0 == (200, 700_000) })
            // Each body is freed once stored and sent: nothing stays charged, nothing waits.
            #expect(try await eventually {
                let samples = try await scrape(daemon.port)
                return samples["thumbd_upstream_buffered_bytes"] == 0 && samples["thumbd_upstream_waiting_for_memory"] == 0
            })
        }
    }

    @Test("/metrics counts requests, cache results, fetches and client mistakes, with Prometheus names")
    func metrics() async throws {
        try await withOriginAndDaemon { origin, daemon in
            #expect(try await request(daemon.port, origin.thumb("/img/m.jpg")).status == 200)  // miss
            #expect(try await request(daemon.port, origin.thumb("/img/m.jpg")).status == 200)  // hit
            #expect(try await request(daemon.port, origin.thumb("/status/503")).status == 502)
            #expect(try await request(daemon.port, "/thumb?url=ftp%3A%2F%2Fx").status == 400)
            #expect(try await request(daemon.port, "/no/such/route/\(UUID())").status == 404)
            let samples = try await scrape(daemon.port)
            #expect(samples[#"thumbd_http_requests_total{route="/thumb",status="200"}"#] == 2)
            #expect(samples[#"thumbd_http_requests_total{route="/thumb",status="400"}"#] == 1)
            // Random paths do not make new series: they are all "other".
            #expect(samples[#"thumbd_http_requests_total{route="other",status="404"}"#] == 1)
            // The 502 was a miss too: a failed /thumb is counted by how it was served, as a
            // failed batch item is.
            #expect(samples[#"thumbd_cache_results_total{result="miss"}"#] == 2)
            #expect(samples[#"thumbd_cache_results_total{result="hit"}"#] == 1)
            #expect(samples[#"thumbd_upstream_fetches_total{outcome="downloaded"}"#] == 1)
            #expect(samples[#"thumbd_upstream_errors_total{code="upstream_status"}"#] == 1)
            #expect(samples[#"thumbd_client_errors_total{code="unsupported_scheme"}"#] == 1)
            #expect(samples["thumbd_upstream_fetch_duration_seconds_count"] == 2)
            #expect((samples["thumbd_upstream_received_bytes_total"] ?? 0) > 1000)
            #expect(samples["thumbd_store_objects"] == 1)
            #expect((samples["thumbd_store_bytes"] ?? 0) > 1000)
            #expect((samples["process_resident_memory_bytes"] ?? 0) > 1_000_000)
            #expect((samples["process_open_fds"] ?? 0) > 3)
            for name in ["thumbd_upstream_in_flight", "thumbd_upstream_queued", "thumbd_resizes_running", "thumbd_resizes_queued",
                         "thumbd_resize_memory_bytes", "thumbd_store_evictions_total",
                         "thumbd_store_write_failures_total", "thumbd_event_streams_open", "thumbd_batches_running"] {
                #expect(samples[name] != nil, "\(name) missing")
            }
            // Prometheus's conventions: snake_case names; counters end in _total.
            let text = String(decoding: try await request(daemon.port, "/metrics").body, as: UTF8.self)
            for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
                let fields = line.split(separator: " ")
                let name = String(fields[2])
                #expect(name.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "_" }, "\(name)")
                #expect(name.hasPrefix("thumbd_") || name.hasPrefix("process_"), "\(name)")
                if fields[3] == "counter" { #expect(name.hasSuffix("_total"), "\(name)") }
            }
            // The access log is off: the server keeps no request's path, and each is counted
            // by the route its handler gave it as it came in.
            let batch = try await daemon.createBatch([origin.url("/img/m.jpg")])
            #expect(try await daemon.allEvents(batch.events).parser.events.last?.type == "end")
            #expect(try await eventually {
                try await scrape(daemon.port)[#"thumbd_http_requests_total{route="/batches/{id}/events",status="200"}"#] == 1
            })
        }
    }

    @Test("metrics.listen moves /metrics to its own address; the main server no longer has it")
    func ownListener() async throws {
        try await withOriginAndDaemon({ $0.metrics.listen = "127.0.0.1:0" }) { origin, daemon in
            #expect(try await request(daemon.port, origin.thumb("/img/o.jpg")).status == 200)
            #expect(try await request(daemon.port, "/metrics").status == 404)
            let port = try #require(daemon.thumbd.metricsPort)
            let samples = try await scrape(port)
            #expect(samples[#"thumbd_http_requests_total{route="/thumb",status="200"}"#] == 1)
            #expect(try await request(port, "/thumb?url=x").status == 404)  // nothing else there
        }
    }

    @Test("/healthz reads the cache file itself: a file that is gone is 503 unhealthy")
    func healthzReadsTheFile() async throws {
        try await withOriginAndDaemon { origin, daemon in
            #expect(try await request(daemon.port, "/healthz").status == 200)
            // The file removed behind the daemon's back (a volume gone, an operator's rm): the
            // daemon's open connections still read their own copy, the file is not there.
            try FileManager.default.removeItem(atPath: daemon.thumbd.configuration.store.path)
            let broken = try await request(daemon.port, "/healthz")
            #expect(broken.status == 503)
            #expect(broken.errorCode == "unhealthy")
        }
    }

    @Test("every answer carries X-Request-Id: the client's when sane, else a new one")
    func requestIDs() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let given = try await request(daemon.port, "/healthz", headers: ["X-Request-Id": "trace-42.a:b_c"])
            #expect(given[header: "X-Request-Id"] == "trace-42.a:b_c")
            let made = try await request(daemon.port, "/healthz")
            let other = try await request(daemon.port, "/healthz")
            let id = try #require(made[header: "X-Request-Id"])
            #expect(id.count == 15 && id.allSatisfy(\.isHexDigit))
            #expect(other[header: "X-Request-Id"] != id)
            // A value that could forge a log line or flood it is replaced.
            for bad in ["two words", String(repeating: "x", count: 200), "a\"b"] {
                let replaced = try await request(daemon.port, "/healthz", headers: ["X-Request-Id": bad])
                #expect(replaced[header: "X-Request-Id"]?.count == 15)
            }
            // Refusals and errors carry one too.
            let refused = try await request(daemon.port, "/thumb?url=x", headers: ["Host": "evil.example"])
            #expect(refused.status == 421 && refused[header: "X-Request-Id"] != nil)
        }
    }

    @Test("the access log's path keeps no secrets: no sig, no query of the image URL")
    func loggablePath() {
        let exchange = Exchange(
            method: "GET", path: "/thumb",
            query: ["url": "https://cdn.example/a.jpg?token=SECRET#x", "w": "64", "sig": "SIGNATURE"],
            status: 200, headers: [], bodyBytes: 10, started: .now)
        let logged = RequestLog.loggable(exchange)
        #expect(!logged.contains("SECRET") && !logged.contains("SIGNATURE"))
        #expect(logged == "/thumb?sig=-&url=https%3A%2F%2Fcdn.example%2Fa.jpg%3F&w=64")
    }
}
