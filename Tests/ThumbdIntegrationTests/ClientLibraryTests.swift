import Foundation
import Testing
import ThumbdClient
import ThumbdTesting

/// The `ThumbdClient` library product, as a Swift tool on the machine uses it: a batch opened
/// and followed to its end, its focus and its cancel, against the real daemon.
@Suite("ThumbdClient: BatchSession")
struct ClientLibraryTests {
    @Test("open a batch with thumbnail parameters, follow every event to end; a refusal throws its message")
    func followToEnd() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let server = "http://127.0.0.1:\(daemon.port)"
            let items = [BatchSession.Item(url: origin.url("/img/lib-a.jpg"), id: "a"),
                         BatchSession.Item(url: origin.url("/status/404"), id: "b")]
            let events = try await blocking { () -> [BatchSession.Event] in
                let batch = try BatchSession.open(server: server, items: items, parameters: ["w": "32", "format": "png"])
                var seen: [BatchSession.Event] = []
                let ended = try batch.follow { seen.append($0); return true }
                #expect(ended)
                return seen
            }
            #expect(events.last?.type == "end")
            let done = try #require(events.first { $0.type == "done" })
            #expect(done.data.contains("\"id\":\"a\"") && done.data.contains("w=32"), "\(done.data)")
            #expect(events.contains { $0.type == "failed" && $0.data.contains("upstream_not_found") })
            let refusal = try await blocking { () -> String in
                do {
                    _ = try BatchSession.open(server: server, items: items, parameters: ["w": "0"])
                    return "accepted"
                } catch { return "\(error)" }
            }
            #expect(refusal.contains("400") && refusal.contains("w must be"), "\(refusal)")
        }
    }

    @Test("focus and cancel a batch still running; stop following when the handler says so")
    func focusAndCancel() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let server = "http://127.0.0.1:\(daemon.port)"
            let items = (0..<3).map { BatchSession.Item(url: origin.url("/gate/lib-\($0)")) }
            let batch = try await blocking { try BatchSession.open(server: server, items: items) }
            try await blocking { try batch.focus([2]) }
            await #expect(throws: DaemonClientError.self) { try await blocking { try batch.focus([9]) } }
            try await blocking { try batch.cancel() }
            // The cancelled batch's events are all there (a late subscriber gets them all).
            let stopped = try await blocking { try batch.follow { _ in false } }
            #expect(!stopped)
            let events = try await blocking { () -> [String] in
                var types: [String] = []
                try batch.follow { types.append($0.type); return true }
                return types
            }
            #expect(events.filter { $0 == "cancelled" }.count == 3 && events.last == "end", "\(events)")
        }
    }
}
