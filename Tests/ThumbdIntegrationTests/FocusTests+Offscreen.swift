import Foundation
import LoopbackClient
import ThumbdCore
import ThumbdTesting
import Testing
import Thumbnailer

/// Items off screen: held back until the screen is done, cancelled when asked, started again.
extension FocusTests {
    @Test("cancelOffscreen: an item off screen long enough is cancelled (its fetch aborted); back on screen it starts again")
    func cancelOffscreen() async throws {
        try await withOriginAndDaemon({ $0.batches.offscreenCancelSeconds = 0.2 }) { origin, daemon in
            let names = (0..<4).map { "/gate/c\($0)" }
            let batch = try await daemon.createBatch(names.map { origin.url($0) }, extra: ",\"focus\":[0,1],\"cancelOffscreen\":true")
            for name in names { #expect(try await eventually { try await origin.requests(name) == 1 }) }
            let scrolled = try await request(daemon.port, "/batches/\(batch.id)/focus", method: "POST",
                                             headers: ["Content-Type": "application/json"], body: "{\"items\":[2,3]}")
            #expect(scrolled.status == 204)
            // Their downloads give way at once (nothing of them had come); after
            // offscreenCancelSeconds they are cancelled.
            #expect(try await eventually {
                let aborted = try await origin.stats().aborted
                return aborted["/gate/c0"] == 1 && aborted["/gate/c1"] == 1
            })
            #expect(try await eventually {
                let counts = try await request(daemon.port, "/batches/\(batch.id)").json["counts"] as? [String: Any]
                return counts?["cancelled"] as? Int == 2
            })
            var snapshot: [String: Any]
            // Item 0 comes back on screen (2 and 3 stay): it is queued and fetched again; item 1
            // stays cancelled.
            _ = try await request(daemon.port, "/batches/\(batch.id)/focus", method: "POST",
                                  headers: ["Content-Type": "application/json"], body: "{\"items\":[0,2,3]}")
            #expect(try await eventually { try await origin.requests("/gate/c0") == 2 })
            snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
            #expect((snapshot["counts"] as? [String: Any])?["cancelled"] as? Int == 1)
            for name in ["c0", "c2", "c3"] { try await origin.release(name) }
            let events = try await daemon.allEvents(batch.events).parser.events
            let done = Set(events.filter { $0.type == "done" }.compactMap { payload($0)["index"] as? Int })
            #expect(done == [0, 2, 3])
            #expect(events.filter { $0.type == "cancelled" }.compactMap { payload($0)["index"] as? Int }.sorted() == [0, 1])
            #expect(payload(events.last!)["cancelled"] as? Int == 1 && payload(events.last!)["done"] as? Int == 3)
            // Items 2 and 3 never left the screen; item 1 was never cancelled twice.
            let stats = try await origin.stats()
            #expect(stats.aborted["/gate/c2"] == nil && stats.requests["/gate/c1"] == 1)
        }
    }

    @Test("without cancelOffscreen nothing is cancelled for leaving the screen: an item that left early yields to the new screen, then is made")
    func offscreenKeptByDefault() async throws {
        // The screen's wait without a cap that a loaded machine could reach.
        try await withOriginAndDaemon({
            $0.batches.offscreenCancelSeconds = 0.05
            $0.batches.screenFirstMilliseconds = 60_000
        }) { origin, daemon in
            let batch = try await daemon.createBatch([origin.url("/gate/k0"), origin.url("/gate/k1"), origin.url("/gate/k2")],
                                                     extra: ",\"focus\":[0]")
            #expect(try await eventually { try await origin.requests("/gate/k0") == 1 })
            #expect(try await origin.requests("/gate/k1") == 0)  // off screen: waits for the screen
            _ = try await request(daemon.port, "/batches/\(batch.id)/focus", method: "POST",
                                  headers: ["Content-Type": "application/json"], body: "{\"items\":[1]}")
            // Item 0 left with nothing of its original come: its download gives way (the origin
            // sees it aborted) and it waits, queued, while item 1 (now shown) is fetched.
            #expect(try await eventually { try await origin.aborted("/gate/k0") == 1 })
            #expect(try await eventually { try await origin.requests("/gate/k1") == 1 })
            let snapshot = try await request(daemon.port, "/batches/\(batch.id)").json
            let states = (snapshot["items"] as? [[String: Any]])?.map { $0["state"] as? String }
            #expect(states?.first == "queued", "\(snapshot)")
            #expect(try await origin.requests("/gate/k0") == 1)
            #expect(try await origin.requests("/gate/k2") == 0)
            // The new screen done: item 0 and item 2 start, and everything is made; nothing was cancelled.
            for name in ["k0", "k1", "k2"] { try await origin.release(name) }
            let events = try await daemon.allEvents(batch.events).parser.events
            #expect(events.filter { $0.type == "done" }.count == 3)
            #expect(!events.contains { $0.type == "cancelled" })
            #expect(try await origin.requests("/gate/k0") == 2)
        }
    }

    @Test("items off screen wait until the screen is done, or screenFirstMilliseconds at most", arguments: [60_000, 200])
    func offscreenWaitsForTheScreen(cap: Int) async throws {
        try await withOriginAndDaemon({ $0.batches.screenFirstMilliseconds = cap }) { origin, daemon in
            let batch = try await daemon.createBatch([origin.url("/gate/screen\(cap)"), origin.url("/img/below\(cap)a.jpg"),
                                                      origin.url("/img/below\(cap)b.jpg")], extra: ",\"focus\":[0]")
            #expect(try await eventually { try await origin.requests("/gate/screen\(cap)") == 1 })
            if cap > 1_000 {
                try await Task.sleep(for: .milliseconds(400))
                #expect(try await origin.requests("/img/below\(cap)a.jpg") == 0)  // held back while the screen loads
                try await origin.release("screen\(cap)")
            } else {
                // The screen's item is still held: the cap starts the others anyway.
                #expect(try await eventually { try await origin.requests("/img/below\(cap)b.jpg") == 1 })
                try await origin.release("screen\(cap)")
            }
            let events = try await daemon.allEvents(batch.events).parser.events
            #expect(events.filter { $0.type == "done" }.count == 3)
            let done = events.filter { $0.type == "done" }.compactMap { payload($0)["index"] as? Int }
            if cap > 1_000 { #expect(done.first == 0) }
        }
    }
}
