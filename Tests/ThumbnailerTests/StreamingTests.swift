import Foundation
import Support
import TestThreads
import Testing
@testable import Thumbnailer

/// A JPEG decoded while its bytes arrive (`thumbnail(streaming:…)`), fed by another thread in
/// small pieces with pauses, as a download feeds it.
@Suite("Thumbnailer: decoding while the bytes arrive", .ownThreads)
struct StreamingTests {
    static let thumbnailer = ThumbnailerTests.thumbnailer
    /// The time limit of a test that does not test the limit: one the whole suite's load on two
    /// cores cannot reach (a 10 s limit did, for a 2000x1500 tile).
    static let noLimit = Duration.seconds(600)

    /// Feeds `body` in pieces of `piece` bytes, pausing after every `every`, then ends the
    /// feed (whole, or failed after `failAfter` bytes).
    static func feed(_ body: Bytes, piece: Int = 8 << 10, every: Int = 16, failAfter: Int? = nil) -> ByteFeed {
        let feed = ByteFeed()
        let writer = Thread {
            body.withUnsafeBytes { bytes in
                var offset = 0
                var pieces = 0
                while offset < bytes.count {
                    if let failAfter, offset >= failAfter {
                        feed.end(whole: false)
                        return
                    }
                    let end = min(bytes.count, offset + piece)
                    feed.append(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                    offset = end
                    pieces += 1
                    if pieces % every == 0 { Thread.sleep(forTimeInterval: 0.002) }
                }
            }
            feed.end(whole: true)
        }
        writer.start()
        return feed
    }

    @Test("the same thumbnail as from the whole body, at libjpeg's eighths and at the loader's whole size",
          arguments: [(256, 256), (600, 400), (1500, 1000), (2000, 1500), (1000, 600), (2900, 1900)])
    func sameAsWhole(size: (Int, Int)) throws {
        let body = try Self.thumbnailer.testImage(width: 3000, height: 2000)
        let spec = ThumbnailSpec(width: size.0, height: size.1, fit: .cover, format: .jpeg, quality: 80)
        let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: body), spec)
        let whole = try Self.thumbnailer.thumbnail(of: body, plan, control: ResizeControl(timeLimit: Self.noLimit))
        let streamed = try Self.thumbnailer.thumbnail(streaming: Self.feed(body), plan, control: ResizeControl(timeLimit: Self.noLimit))
        #expect(streamed.width == whole.width && streamed.height == whole.height)
        #expect(streamed.body == whole.body)
    }

    @Test("a feed that fails midway fails the decode, and one cut short does too: libjpeg's (2/8) and the loader's (8/8)",
          arguments: [256, 2900])
    func failedFeed(width: Int) throws {
        let (body, plan) = try Self.photo(width: width)
        #expect((plan.decodeEighths == nil) == (width == 2900))
        #expect(throws: ThumbnailerError.self) {
            try Self.thumbnailer.thumbnail(streaming: Self.feed(body, failAfter: body.count / 2), plan,
                                           control: ResizeControl(timeLimit: Self.noLimit))
        }
        let half = Bytes(body.prefix(body.count / 2))
        #expect(throws: ThumbnailerError.self) {
            try Self.thumbnailer.thumbnail(streaming: Self.feed(half), plan, control: ResizeControl(timeLimit: Self.noLimit))
        }
    }

    /// A 3000×2000 JPEG and the plan of its `width`×`width` cover tile.
    static func photo(width: Int = 256) throws -> (body: Bytes, plan: ThumbnailPlan) {
        let body = try thumbnailer.testImage(width: 3000, height: 2000)
        let plan = try thumbnailer.plan(thumbnailer.header(of: body),
                                        ThumbnailSpec(width: width, height: width, fit: .cover, format: .jpeg, quality: 80))
        return (body, plan)
    }

    @Test("a decode waiting for bytes that never come ends when its feed is failed (a cancel)")
    func cancelWhileWaiting() throws {
        let (body, plan) = try Self.photo()
        let feed = ByteFeed()
        body.withUnsafeBytes { feed.append(UnsafeRawBufferPointer(rebasing: $0.prefix(body.count / 3))) }
        let control = ResizeControl(timeLimit: .seconds(120))
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) {
            control.cancel()
            feed.end(whole: false)
        }
        let started = ContinuousClock.now
        #expect(throws: ThumbnailerError.self) { try Self.thumbnailer.thumbnail(streaming: feed, plan, control: control) }
        // Not woken, it would wait for its 120 s limit; woken, it ends a moment after the cancel.
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    /// CPU time this thread has used.
    static func threadCPU() -> Duration {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return .seconds(now.tv_sec) + .nanoseconds(now.tv_nsec)
    }

    @Test("a still image is decoded in the calling thread (at its priority), from a whole body as from a feed")
    func decodesInCallingThread() throws {
        let body = try Self.thumbnailer.testImage(width: 4000, height: 3000)
        let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: body),
                                             ThumbnailSpec(width: 160, height: 160, fit: .cover, format: .jpeg, quality: 80))
        var started = Self.threadCPU()
        _ = try Self.thumbnailer.thumbnail(of: body, plan, control: ResizeControl(timeLimit: Self.noLimit))
        let whole = Self.threadCPU() - started
        let feed = ByteFeed()
        body.withUnsafeBytes { feed.append($0) }
        feed.end(whole: true)
        started = Self.threadCPU()
        _ = try Self.thumbnailer.thumbnail(streaming: feed, plan, control: ResizeControl(timeLimit: Self.noLimit))
        let streamed = Self.threadCPU() - started
        // The decode of 12 megapixels (shrunk by 8 in libjpeg) is milliseconds of CPU. A caller
        // whose decode ran on libvips's workers only waited for them: it used under a third of
        // the streamed decode's CPU (measured, when the whole body's decode ran there).
        #expect(streamed > .milliseconds(5), "streamed \(streamed)")
        #expect(whole * 3 > streamed, "whole body \(whole), streamed \(streamed)")
    }

    @Test("a streamed decode past its time limit stops between strips: timedOut")
    func timeLimit() throws {
        let (body, plan) = try Self.photo()
        let feed = ByteFeed()
        body.withUnsafeBytes { feed.append($0) }
        feed.end(whole: true)
        let control = ResizeControl(timeLimit: .milliseconds(1))
        Thread.sleep(forTimeInterval: 0.01)
        #expect(throws: ThumbnailerError.timedOut(.milliseconds(1))) {
            try Self.thumbnailer.thumbnail(streaming: feed, plan, control: control)
        }
    }
}
