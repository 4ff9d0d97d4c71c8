import Foundation
import TestThreads
import Testing
import ThumbdTesting

/// Expiry against a real origin that sends `ETag`, `Last-Modified` and `max-age=1`, and
/// answers a matching `If-None-Match` with 304.
@Suite("Revalidation and serving stale", .ownThreads)
struct RevalidationTests {
    /// Waits until the store has committed the `objects` fetched so far (a revalidation needs
    /// their stored validators: on a loaded machine a commit came more than 2 s after its
    /// answer, and the request after the expiry was a new download), then until an object
    /// stored with `max-age=1` has expired (whole seconds: up to 2 s).
    private func expire(_ daemon: TestDaemon, objects: Int = 1) async throws {
        #expect(try await eventually { daemon.thumbd.store.statistics().objects == objects })
        try await Task.sleep(for: .milliseconds(2100))
    }

    @Test("an expired image is revalidated with If-None-Match: a 304 renews it without a download")
    func notModified() async throws {
        try await withOriginAndDaemon({ $0.store.graceSeconds = 0 }) { origin, daemon in
            // The 304 renews for a minute (its own Cache-Control), so the third ask is a hit.
            let target = origin.thumb("/validated/a?cc304=" + "max-age=60".queryEncoded)
            let first = try await request(daemon.port, target)
            #expect(first.status == 200)
            #expect(first[header: "X-Thumbd-Cache"] == "miss")
            try await expire(daemon)
            let second = try await request(daemon.port, target)
            #expect(second.status == 200)
            #expect(second[header: "X-Thumbd-Cache"] == "revalidated")
            #expect(second.body == first.body)
            #expect(second[header: "ETag"] == first[header: "ETag"])
            #expect(try await origin.requests("/validated/a") == 2)
            #expect(try await origin.notModified("/validated/a") == 1)
            // Renewed for another max-age: a hit, no third request.
            let third = try await request(daemon.port, target)
            #expect(third[header: "X-Thumbd-Cache"] == "hit")
            #expect(try await origin.requests("/validated/a") == 2)
        }
    }

    @Test("a changed image is downloaded again: the 200 replaces the stored copy")
    func changed() async throws {
        try await withOriginAndDaemon({ $0.store.graceSeconds = 0 }) { origin, daemon in
            try await origin.put("c", ThumbnailTests.thumbnailer.testImage(width: 20, height: 10, format: .png).array)
            let target = origin.thumb("/validated/c")
            let first = try await request(daemon.port, target)
            #expect(first.status == 200)
            try await origin.put("c", ThumbnailTests.thumbnailer.testImage(width: 30, height: 10, format: .png).array)
            try await expire(daemon)
            let second = try await request(daemon.port, target)
            #expect(second.status == 200)
            #expect(second[header: "X-Thumbd-Cache"] == "miss")
            #expect(second.body != first.body)
            #expect(second.body == (try await origin.direct("/validated/c")))
            #expect(try await origin.notModified("/validated/c") == 0)
        }
    }

    @Test("within the grace, 50 clients get the stale copy at once and the origin sees one refresh")
    func staleWhileRevalidate() async throws {
        // A long grace: on a loaded machine the 50 requests may start seconds after the
        // expiry, and past the default 10 s they would (rightly) wait for the held refresh.
        try await withOriginAndDaemon({ $0.store.graceSeconds = 600 }) { origin, daemon in
            // The refresh is held at the origin until released: every stale answer below
            // arrives while it is still running, so none of them waited for it.
            let target = origin.thumb("/validated/s?gate=s&cc304=" + "max-age=60".queryEncoded)
            #expect(try await request(daemon.port, target).status == 200)
            try await expire(daemon)
            // 50 connections on one thread (the tests share the dispatch pool: 50 blocking
            // tasks would starve the other suites).
            let results = try await blocking { () -> [HTTPResult] in
                let connections = try (0..<50).map { _ in try RawConnection(port: daemon.port) }
                for connection in connections { try connection.send("GET", target) }
                return try connections.map { try $0.read() }
            }
            #expect(results.allSatisfy { $0.status == 200 && $0[header: "X-Thumbd-Cache"] == "stale" })
            #expect(results.allSatisfy { $0[header: "Cache-Control"] == "public, max-age=0" })
            #expect(try await eventually { try await origin.requests("/validated/s") == 2 })  // the first, one refresh
            #expect(try await origin.notModified("/validated/s") == 0)  // still held
            try await origin.release("s")
            // The one refresh was conditional and answered 304; then hits.
            #expect(try await eventually { try await origin.notModified("/validated/s") == 1 })
            #expect(try await eventually {
                try await request(daemon.port, target)[header: "X-Thumbd-Cache"] == "hit"
            })
            #expect(try await origin.requests("/validated/s") == 2)
        }
    }

    @Test("must-revalidate is honoured: no stale answer, the client waits for the 304")
    func mustRevalidate() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let target = origin.thumb("/validated/m?cc=" + "max-age=1, must-revalidate".queryEncoded)
            #expect(try await request(daemon.port, target).status == 200)
            try await expire(daemon)
            let second = try await request(daemon.port, target)
            #expect(second[header: "X-Thumbd-Cache"] == "revalidated")
            #expect(try await origin.notModified("/validated/m") == 1)
        }
    }

    @Test("a thumbnail follows its original: a 304 renews the variant without a second resize")
    func variantFollowsOriginal() async throws {
        try await withOriginAndDaemon({ $0.store.graceSeconds = 0 }) { origin, daemon in
            let target = origin.thumb("/validated/v", "&w=32")
            let first = try await request(daemon.port, target)
            #expect(first.status == 200)
            #expect(daemon.thumbd.thumbnailsMade == 1)
            try await expire(daemon, objects: 2)
            let second = try await request(daemon.port, target)
            #expect(second.status == 200)
            #expect(second[header: "X-Thumbd-Cache"] == "revalidated")
            #expect(second.body == first.body)
            #expect(daemon.thumbd.thumbnailsMade == 1)
            #expect(try await origin.notModified("/validated/v") == 1)
        }
    }
}
