import Foundation
import Support
import ThumbdCore
import LoopbackClient
import ThumbdTesting
import Testing
import Thumbnailer

/// How many of a screen's originals stream with the shipped settings.
extension StreamedDecodeTests {
    @Test("with the shipped settings, a screen of 28 large JPEGs (the page's first screen at 1280x900) streams every one at once")
    func wholeScreenStreams() async throws {
        let origin = try await TestOrigin()
        let daemon = try TestDaemon()
        defer { daemon.remove(); origin.stop() }
        let count = 28
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000).array
        for index in 0..<count { try await origin.put("screen\(index).jpg", body) }
        // Each sends its first 16 KB (the header), then waits for the test: all 28 are on
        // screen and downloading at once, as a grid's first screen is.
        let urls = (0..<count).map { origin.url("/file/screen\($0).jpg?chunk=16384&every=10&hold=screen") }
        let batch = try await daemon.createBatch(urls, extra: "\(Self.tile),\"focus\":[\((0..<count).map(String.init).joined(separator: ","))]")
        let client = try await blocking { try EventStreamClient(port: daemon.port, path: batch.events) }
        defer { client.close() }
        // With 16 slots, 12 of them waited, whole, for one to free when the downloads ended.
        #expect(try await eventually(30) { daemon.daemon?.streamsRunning == count },
                "\(daemon.daemon?.streamsRunning ?? -1) streams running")
        try await origin.release("screen")
        try await blocking { try client.read(seconds: 120) }
        #expect(client.parser.events.filter { $0.type == "done" }.count == count)
        #expect(daemon.daemon?.thumbnailsStreamed == count)
    }
}
