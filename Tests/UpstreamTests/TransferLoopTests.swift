import Foundation
import Synchronization
import Testing
import Support
import ThumbdTesting
@testable import Upstream

@Suite("TransferLoop against a real origin")
struct TransferLoopTests {
    final class Recorder: Sendable {
        let progress = Mutex<[FetchProgress]>([])
        let outcome = Mutex<Result<UpstreamResponse, UpstreamError>?>(nil)
    }

    static func loop() -> TransferLoop {
        var configuration = TransferLoop.Configuration()  // connects anywhere: the origin is on loopback
        // A silent origin must outlast a loaded machine's slowest test step, not end in a timeout.
        configuration.lowSpeedSeconds = 120
        configuration.timeoutMilliseconds = 300_000
        let loop = TransferLoop(configuration: configuration)
        loop.start()
        return loop
    }

    @Test("progress is published while the bytes arrive, with the total, then the outcome")
    func progress() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loop = Self.loop()
        defer { loop.shutdown() }
        let recorder = Recorder()
        let job = FetchJob(
            url: origin.url("/slow?size=40960&chunk=8192&every=150"), host: "127.0.0.1", priority: .normal,
            onProgress: { progress in recorder.progress.withLock { $0.append(progress) } },
            onComplete: { _, result in recorder.outcome.withLock { $0 = result } })
        #expect(loop.submit(job))
        #expect(try await eventually { recorder.outcome.withLock { $0 != nil } })
        let updates = recorder.progress.withLock { $0 }
        #expect(updates.count >= 3)  // several updates during a ~0.6 s transfer, not just the end
        #expect(updates.allSatisfy { $0.total == 40960 })
        #expect(zip(updates, updates.dropFirst()).allSatisfy { $0.received < $1.received })
        #expect(updates.last?.received == 40960)
        #expect(job.progress == FetchProgress(received: 40960, total: 40960))
        let response = try recorder.outcome.withLock { try #require($0) }.get()
        #expect(response.body.count == 40960)
        #expect(response.body.array.prefix(3).elementsEqual([0xFF, 0xD8, 0xFF]))  // the bytes as sent (a JPEG)
    }

    @Test("a body tapped after its first bytes came is read from the start: the body so far, then the rest")
    func lateTap() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let body = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try await origin.put("late.bin", body)
        let loop = Self.loop()
        defer { loop.shutdown() }
        let recorder = Recorder()
        let job = FetchJob(url: origin.url("/file/late.bin?chunk=16384&every=5&hold=late"), host: "127.0.0.1", priority: .normal,
                           onComplete: { _, result in recorder.outcome.withLock { $0 = result } })
        #expect(loop.submit(job))
        // The first 16 KB are in (and the origin holds the rest): only now is the body tapped.
        #expect(try await eventually(20) { job.progress.received >= 16384 })
        final class Read: Sendable { let bytes = Mutex<[UInt8]>([]); let ends = Mutex<[Bool]>([]) }
        let read = Read()
        let token = job.observeBody { event in
            switch event {
            case .bytes(let bytes, let soFar):
                read.bytes.withLock { $0 = $0.isEmpty ? Array(soFar) : $0 + Array(bytes) }
            case .end(let whole):
                read.ends.withLock { $0.append(whole) }
            }
        }
        #expect(token != nil)
        try await origin.release("late")
        #expect(try await eventually(20) { recorder.outcome.withLock { $0 != nil } })
        #expect(read.ends.withLock { $0 } == [true])
        #expect(read.bytes.withLock { $0 } == body)
        #expect(job.observeBody { _ in } == nil)  // completed: nothing more to read
    }

    @Test("a cancelled transfer stops, and the origin sees the connection close")
    func cancel() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loop = Self.loop()
        defer { loop.shutdown() }
        let recorder = Recorder()
        let job = FetchJob(url: origin.url("/hang"), host: "127.0.0.1", priority: .normal,
                           onComplete: { _, result in recorder.outcome.withLock { $0 = result } })
        #expect(loop.submit(job))
        #expect(try await eventually { try await origin.requests("/hang") == 1 })
        loop.cancel(job)
        #expect(try await eventually { recorder.outcome.withLock { $0 != nil } })
        #expect(recorder.outcome.withLock { $0.map { result in if case .failure(.cancelled) = result { true } else { false } } } == true)
        #expect(try await eventually { try await origin.aborted("/hang") == 1 })
    }

    @Test("a burst's connections are kept for the next burst, not closed as its last transfers end")
    func keepsConnections() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let loop = Self.loop()
        defer { loop.shutdown() }
        // 20 at once, each held 300 ms: 20 connections. curl's default would keep only four
        // per transfer still running, closing four of them as the burst ends.
        for burst in 0..<2 {
            let done = Mutex(0)
            for index in 0..<20 {
                let job = FetchJob(url: origin.url("/img/keep-\(burst)-\(index).jpg?delay=300"), host: "127.0.0.1",
                                   priority: .normal, onComplete: { _, _ in done.withLock { $0 += 1 } })
                #expect(loop.submit(job))
            }
            #expect(try await eventually { done.withLock { $0 } == 20 })
            #expect(try await origin.stats().connections == 20)
        }
    }
}
