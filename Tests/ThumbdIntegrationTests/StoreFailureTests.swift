import Foundation
import InMemoryLogging
import Logging
import Testing
import ThumbdTesting
@testable import BlobStore
@testable import ThumbdCore

/// A cache file that fails every read, behind the daemon's back.
@Suite("A failing cache file")
struct StoreFailureTests {
    @Test("lookups that fail on every request are logged once per window, not once per request; answers still come")
    func lookupFailuresRateLimited() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let log = InMemoryLogHandler()
        var logger = Logger(label: "thumbd.test") { _ in log }
        logger.logLevel = .error
        // No hot cache: every lookup of a stored key reads SQLite.
        let daemon = try TestDaemon(logger: logger) { $0.store.memoryBytes = 0 }
        defer { daemon.remove() }
        let target = origin.thumb("/img/failing.jpg")
        #expect(try await request(daemon.port, target).status == 200)
        #expect(try await eventually { daemon.thumbd.store.statistics().objects == 1 })
        // The table renamed by another connection: every read the daemon makes now fails.
        let other = try Connection(path: daemon.configuration.store.path, readOnly: false)
        try other.execute("ALTER TABLE objects RENAME TO objects_gone")
        other.close()
        for _ in 0..<40 {
            #expect(try await request(daemon.port, target).status == 200)  // fetched again, answered
        }
        let lines = log.entries.filter { "\($0.message)" == "store.lookup failed" }
        #expect((1...2).contains(lines.count), "\(lines.count) lines for 40 failed lookups")
    }
}
