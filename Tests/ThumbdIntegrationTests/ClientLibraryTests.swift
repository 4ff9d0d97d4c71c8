import Foundation
import Testing
import ThumbdClient
import ThumbdTesting

/// The `ThumbdClient` library product, as a Swift app or tool uses it (`DaemonClient`, on
/// AsyncHTTPClient): an image, a batch's typed events in order, a task cancelled (and its
/// batch with it), a host name, against the real daemon. (A daemon restarted under an open
/// batch, a process of its own: scripts/smoke/test_23_client_restart.sh, through `thumbd warm`.)
@Suite("ThumbdClient: DaemonClient")
struct ClientLibraryTests {
    static func client(_ daemon: TestDaemon, host: String = "127.0.0.1") -> DaemonClient {
        DaemonClient(server: "http://\(host):\(daemon.port)", timeout: .seconds(30))
    }

    @Test("an image and its cache status; a refusal throws thumbd's code; a host name (localhost) works")
    func image() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let thumbd = Self.client(daemon, host: "localhost")
            let first = try await thumbd.image(origin.url("/img/lib-image.jpg"), ThumbnailOptions(w: 32, format: "png"))
            #expect(first.cache == "miss" && first.contentType == "image/png" && first.bytes.starts(with: [0x89, 0x50]))
            let again = try await thumbd.image(origin.url("/img/lib-image.jpg"), ThumbnailOptions(w: 32, format: "png"))
            #expect(again.cache == "hit" && again.bytes == first.bytes)
            await #expect { try await thumbd.image(origin.url("/img/lib-image.jpg"), ThumbnailOptions(w: 0)) } throws: { error in
                (error as? DaemonError)?.status == 400 && (error as? DaemonError)?.error == "bad_parameter"
            }
            await #expect { try await thumbd.image(origin.url("/status/404")) } throws: { error in
                (error as? DaemonError)?.error == "upstream_not_found"
            }
            let unreachable = DaemonClient(server: "http://127.0.0.1:9", timeout: .seconds(5))
            await #expect { try await unreachable.stats() } throws: { error in (error as? DaemonError)?.status == 0 }
        }
    }

    @Test("a batch's typed events arrive in order: opened first, each item's outcome, end last")
    func typedEvents() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let items: [BatchItem] = [BatchItem(url: origin.url("/img/lib-a.jpg"), id: "a"),
                                      BatchItem(url: origin.url("/status/404"), id: "b")]
            var events: [BatchEvent] = []
            for try await event in Self.client(daemon).batch(items, BatchOptions(thumbnail: ThumbnailOptions(w: 32, format: "png"))) {
                events.append(event)
            }
            guard case .opened(_, let created) = events.first else { Issue.record("first: \(String(describing: events.first))"); return }
            #expect(created.map(\.id) == ["a", "b"])
            guard case .end(let end) = events.last else { Issue.record("last: \(String(describing: events.last))"); return }
            #expect(end.total == 2 && end.done == 1 && end.failed == 1)
            let done = events.compactMap { if case .done(let done) = $0 { done } else { nil } }
            #expect(done.count == 1 && done.first?.id == "a" && done.first?.contentType == "image/png" && done.first?.src.contains("w=32") == true)
            let failed = events.compactMap { if case .failed(let failure) = $0 { failure } else { nil } }
            #expect(failed.count == 1 && failed.first?.error == "upstream_not_found")
            // A refused batch throws thumbd's error.
            await #expect {
                for try await _ in Self.client(daemon).batch(items, BatchOptions(thumbnail: ThumbnailOptions(w: 0))) {}
            } throws: { error in (error as? DaemonError)?.status == 400 }
        }
    }

    @Test("a batch of cached items comes whole from its POST's answer: the same events, no event stream opened")
    func warmBatch() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let items = [BatchItem(url: origin.url("/img/lib-w1.jpg"), id: "w1"), BatchItem(url: origin.url("/img/lib-w2.jpg"), id: "w2")]
            let options = BatchOptions(thumbnail: ThumbnailOptions(w: 24, format: "png"))
            var cold: [BatchEvent] = []
            for try await event in Self.client(daemon).batch(items, options) { cold.append(event) }
            #expect(cold.filter { if case .done = $0 { true } else { false } }.count == 2)
            // The cold batch's stream is counted once it has closed (at most 1 s after end).
            #expect(try await eventually(10) { try await Self.eventStreamsAnswered(daemon) == 1 })
            var warm: [BatchEvent] = []
            for try await event in Self.client(daemon).batch(items, options) { warm.append(event) }
            let done = warm.compactMap { if case .done(let done) = $0 { done } else { nil } }
            #expect(done.count == 2 && done.allSatisfy { ["hit", "coalesced"].contains($0.cache) })
            guard case .end(let end) = warm.last else { Issue.record("last: \(String(describing: warm.last))"); return }
            #expect(end.done == 2)
            // A stream the warm batch opened would be counted within 1 s of its end.
            #expect(try await eventually(2) { try await Self.eventStreamsAnswered(daemon) > 1 } == false)
        }
    }

    /// How many `GET /batches/<id>/events` the daemon has answered (its metrics).
    static func eventStreamsAnswered(_ daemon: TestDaemon) async throws -> Int {
        let text = try await request(daemon.port, "/metrics").text
        return text.split(separator: "\n").filter { $0.hasPrefix("thumbd_http_requests_total{route=\"/batches/{id}/events\"") }
            .compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }.reduce(0, +)
    }

    @Test("cancelling the task that follows a batch cancels the batch on the daemon; focus reaches it")
    func cancelled() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let thumbd = Self.client(daemon)
            let items = (0..<3).map { BatchItem(url: origin.url("/gate/lib-cancel-\($0)")) }
            let opened = AsyncStream<String>.makeStream()
            let follower = Task {
                for try await event in thumbd.batch(items) {
                    if case .opened(let id, _) = event { opened.continuation.yield(id) }
                }
            }
            var ids = opened.stream.makeAsyncIterator()
            let id = try #require(await ids.next())
            try await thumbd.focus(batch: id, [2])
            await #expect { try await thumbd.focus(batch: id, [9]) } throws: { error in (error as? DaemonError)?.status == 400 }
            follower.cancel()
            #expect(try await eventually(10) {
                let snapshot = try await request(daemon.port, "/batches/\(id)").json
                return (snapshot["counts"] as? [String: Any])?["cancelled"] as? Int == 3
            })
            for index in 0..<3 { try await origin.release("lib-cancel-\(index)") }
        }
    }
}
