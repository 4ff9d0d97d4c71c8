import Foundation
import Testing
@testable import ThumbdCore
import ThumbdTesting
import LoopbackClient
import Support

/// Kept batches bounded: finished batches were kept for their whole retention without any
/// bound (400 batches of 1,000 refused URLs grew RSS by 240 MB).
@Suite("Memory held by finished batches")
struct BatchMemoryTests {
    /// A batch of `count` refused URLs: every item fails while it is created, so it is
    /// finished when POST answers.
    func refusedBatch(_ daemon: TestDaemon, count: Int) async throws -> String {
        let urls = (0..<count).map { "ftp://example.org/refused-\($0)-" + String(repeating: "x", count: 60) }
        return try await daemon.createBatch(urls).id
    }

    @Test("past batches.maxKept the oldest finished batches answer 404; the newest stay")
    func countBound() async throws {
        let daemon = try TestDaemon { $0.batches.maxKept = 3 }
        defer { daemon.remove() }
        var ids: [String] = []
        for _ in 0..<6 { ids.append(try await refusedBatch(daemon, count: 10)) }
        // Creating one prunes the finished ones first (ids[3...5] stay), then it finishes too:
        // a keepalive tick in between (a loaded machine) prunes again and takes ids[3] as
        // well, so ids[3] is the one batch whose fate depends on timing.
        let last = try await refusedBatch(daemon, count: 1)
        for id in ids.prefix(3) { #expect(try await request(daemon.port, "/batches/\(id)").status == 404, "\(id)") }
        for id in ids.suffix(2) + [last] {
            #expect(try await request(daemon.port, "/batches/\(id)").status == 200, "\(id)")
        }
    }

    @Test("past batches.maxKeptBytes the oldest finished batches go; kept memory stays within the budget")
    func byteBound() async throws {
        let budget = 1 << 20
        let daemon = try TestDaemon { $0.batches.maxKeptBytes = budget; $0.batches.maxItems = 1000 }
        defer { daemon.remove() }
        var first: String?
        for _ in 0..<12 {
            let id = try await refusedBatch(daemon, count: 1000)
            first = first ?? id
        }
        _ = try await refusedBatch(daemon, count: 1)
        let kept = daemon.thumbd.keptBatchBytes
        #expect(kept <= budget + 4096, "finished batches hold \(kept) bytes")
        #expect(kept > budget / 4, "the accounting counts nothing: \(kept)")
        #expect(try await request(daemon.port, "/batches/\(first!)").status == 404)
    }
}
