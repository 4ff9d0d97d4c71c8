import Dispatch
import Foundation
import Synchronization
import Testing
import Support
import Thumbnailer
import Upstream
import BlobStore
@testable import ThumbdCore

/// The lane's streamed decodes: their workers' mail, the stop, and the one memory rule they share
/// with resizes.
extension ResizeLaneTests {
    /// A lane with one stream worker and a budget of 100.
    static func streamLane(workers: Int, timeLimit: Duration = .seconds(10)) -> ResizeLane {
        var configuration = ResizeLane.Configuration(workers: workers, maxQueued: 2, maxMemoryBytes: 100, timeLimit: timeLimit,
                                                     watchdogSlack: .milliseconds(100))
        configuration.streamWorkers = 1
        let lane = ResizeLane(configuration: configuration)
        lane.start()
        return lane
    }

    /// Starts a stream of `cost` that logs "stream" and holds until the gate is signalled;
    /// returns once it runs.
    static func holdStream(_ lane: ResizeLane, cost: Int, _ gate: Gate) async throws {
        #expect(lane.startStream(cost: cost) {
            gate.add("stream")
            gate.semaphore.wait()
        })
        try await wait { gate.entries == ["stream"] }
    }

    @Test("a worker reads its mail in order, each piece once: a job delivered just before the exit is run, not overwritten")
    func mailboxKeepsAJobBeforeTheExit() {
        let worker = ResizeLane.Worker()
        let ran = Mutex(false)
        worker.deliver(.stream(ResizeLane.StreamJob(cost: 1) { ran.withLock { $0 = true } }))
        worker.deliver(.exit)  // stop() telling the worker to exit before it read the job
        guard case .stream(let job) = worker.next() else {
            Issue.record("the job was overwritten by the exit")
            return
        }
        job.body()
        #expect(ran.withLock { $0 })
        guard case .exit = worker.next() else {
            Issue.record("the exit was lost")
            return
        }
    }

    @Test("stop() waits for a streamed decode that runs, which then finishes and gives its memory back")
    func stopWaitsForStreams() async throws {
        // stop() waits for a running stream until the time limit and a second have passed:
        // with 10 s, a CI run whose test process stalled for 28 s saw it return meanwhile.
        let lane = Self.streamLane(workers: 1, timeLimit: .seconds(600))
        let gate = Gate()
        #expect(lane.startStream(cost: 40) {
            gate.add("stream started")
            gate.semaphore.wait()
            gate.add("stream finished")
        })
        try await Self.wait { gate.entries == ["stream started"] }
        let stopped = Mutex(false)
        let thread = Thread {
            lane.stop()
            stopped.withLock { $0 = true }
        }
        thread.start()
        try await Task.sleep(for: .milliseconds(200))
        #expect(!stopped.withLock { $0 }, "stop() returned while a stream still ran")
        gate.semaphore.signal()
        try await Self.wait { stopped.withLock { $0 } }
        #expect(stopped.withLock { $0 })
        #expect(gate.entries == ["stream started", "stream finished"])
        #expect(lane.load.memoryInUse == 0)
        #expect(!lane.startStream(cost: 1) {})  // stopped: nothing new starts
    }

    @Test("one admission rule for resizes and streams: a resize whose memory does not fit beside a running stream waits for it")
    func resizeWaitsForStreamMemory() async throws {
        let lane = Self.streamLane(workers: 2)
        defer { lane.stop() }
        let gate = Gate()
        try await Self.holdStream(lane, cost: 80, gate)
        let task = lane.submit(cost: 50, urgency: Urgency(.normal)) { _ in gate.add("resize") } dropped: { _ in } timedOut: {}
        #expect(task != nil)
        try await Task.sleep(for: .milliseconds(200))
        #expect(gate.entries == ["stream"], "a resize started beside a stream past the memory budget")
        #expect(lane.load.memoryInUse <= 100)
        gate.semaphore.signal()
        try await Self.wait { gate.entries == ["stream", "resize"] }
        #expect(gate.entries == ["stream", "resize"])
    }

    @Test("a stream's unread bytes count in the budget as they come and go: a resize waits for them, then starts")
    func streamFeedCharged() async throws {
        let lane = Self.streamLane(workers: 2)
        defer { lane.stop() }
        let gate = Gate()
        try await Self.holdStream(lane, cost: 40, gate)
        lane.chargeStream(20)  // the feed holds 20 bytes the decode has not read
        #expect(lane.load.memoryInUse == 60)
        _ = lane.submit(cost: 50, urgency: Urgency(.normal)) { _ in gate.add("resize") } dropped: { _ in } timedOut: {}
        try await Task.sleep(for: .milliseconds(200))
        #expect(gate.entries == ["stream"], "a resize started past the budget the feed's bytes fill")
        lane.chargeStream(-20)  // read: the room comes back, and the waiting resize starts
        try await Self.wait { gate.entries == ["stream", "resize"] }
        #expect(gate.entries == ["stream", "resize"])
        gate.semaphore.signal()
        try await Self.wait { lane.load.memoryInUse == 0 }
        #expect(lane.load.memoryInUse == 0)
    }
}
