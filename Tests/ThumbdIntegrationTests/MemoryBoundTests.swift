import Foundation
import TestThreads
import Testing
import ThumbdCore
import ThumbdTesting
import Thumbnailer

/// `thumbnails.maxMemoryBytes` holds with streamed decodes and resizes running together: the
/// estimates of what runs at once never pass it (the one rule the lane admits both by), and
/// what streams hold beyond their estimates (their unread bytes) is counted as it comes.
@Suite("One memory budget for streams and resizes", .ownThreads)
struct MemoryBoundTests {
    @Test("on-screen batch items streaming and /thumb resizes at once: the estimates together stay within the budget")
    func budgetHolds() async throws {
        let thumbnailer = try Thumbnailer()
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let budget = 12 << 20
        let daemon = try TestDaemon { $0.thumbnails.maxMemoryBytes = budget }
        defer { daemon.remove() }
        for index in 0..<12 {
            let body = try thumbnailer.testImage(width: 2400 + 8 * index, height: 1600)
            try await origin.put("m\(index).jpg", body.array)
        }
        // Six on-screen items arriving slowly (streamed), six /thumb resizes of others at once.
        let streamed = (0..<6).map { origin.url("/file/m\($0).jpg?delay=50&chunk=16384&every=10") }
        let focus = (0..<6).map(String.init).joined(separator: ",")
        async let batch: Void = {
            let created = try await daemon.createBatch(streamed, extra: ",\"w\":200,\"h\":200,\"fit\":\"cover\",\"format\":\"jpeg\",\"focus\":[\(focus)]")
            let events = try await daemon.allEvents(created.events).parser.events
            #expect(events.filter { $0.type == "done" }.count == 6)
        }()
        // The resizes are asked once a stream runs: both kinds hold memory at once.
        #expect(try await eventually(20) { daemon.thumbd.streamsRunning >= 1 })
        let resized = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 6..<12 {
                group.addTask { try await request(daemon.port, origin.thumb("/file/m\(index).jpg?delay=50", "&w=300&format=jpeg")).status }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        try await batch
        #expect(resized == Array(repeating: 200, count: 6))
        let peak = daemon.thumbd.resizeMemoryPeak
        #expect(daemon.thumbd.thumbnailsStreamed >= 1 && daemon.thumbd.thumbnailsMade >= 7)
        #expect(peak > 0 && peak <= budget, "the estimates reached \(peak) bytes together, past \(budget)")
    }
}
