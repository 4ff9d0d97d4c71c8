import Dispatch
import Foundation
import Synchronization
import Testing
import Support
import Thumbnailer
import Upstream
import BlobStore
@testable import ThumbdCore

/// The resize lane's rules, with tasks that block on a gate: no libvips, no socket.
@Suite("ResizeLane")
struct ResizeLaneTests {
    final class Gate: Sendable {
        let semaphore = DispatchSemaphore(value: 0)
        let log = Mutex<[String]>([])
        func add(_ entry: String) { log.withLock { $0.append(entry) } }
        var entries: [String] { log.withLock { $0 } }
    }

    static func lane(workers: Int = 1, queued: Int = 8, memory: Int = 100, limit: Duration = .seconds(10)) -> ResizeLane {
        let lane = ResizeLane(configuration: .init(workers: workers, maxQueued: queued, maxMemoryBytes: memory, timeLimit: limit,
                                                   watchdogSlack: .milliseconds(100)))
        lane.start()
        return lane
    }

    static func wait(until condition: () -> Bool) async throws {
        for _ in 0..<3_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
    }

    @Test("at most `workers` run; the queue is bounded (then nil: 503 busy); priority, then the cheaper, go first")
    func boundsAndOrder() async throws {
        let lane = Self.lane(workers: 1, queued: 3, limit: .seconds(600))
        let gate = Gate()
        func submit(_ name: String, cost: Int, _ priority: Priority = .normal) -> ResizeLane.Task? {
            let urgency = Urgency(priority)
            return lane.submit(cost: cost, urgency: urgency) { _ in
                gate.add(name)
                gate.semaphore.wait()
            } dropped: { _ in gate.add("dropped \(name)") } timedOut: { gate.add("timeout \(name)") }
        }
        #expect(submit("first", cost: 10) != nil)
        try await Self.wait { lane.load.running == 1 }
        #expect(submit("expensive", cost: 50) != nil)
        #expect(submit("cheap", cost: 5) != nil)
        #expect(submit("urgent", cost: 90, .high) != nil)
        #expect(submit("one too many", cost: 1) == nil)  // 3 queued already
        #expect(lane.load == .init(running: 1, queued: 3, memoryInUse: 10, started: 1))
        for _ in 0..<4 { gate.semaphore.signal() }
        try await Self.wait { lane.load.started == 4 && lane.load.running == 0 }
        #expect(gate.entries == ["first", "urgent", "cheap", "expensive"])
    }

    @Test("a task focused while it waits goes first, high priority included; one unfocused falls back to its place")
    func focusWhileQueued() async throws {
        let lane = Self.lane(workers: 1, queued: 4, limit: .seconds(600))
        let gate = Gate()
        func submit(_ name: String, cost: Int, _ urgency: Urgency) {
            _ = lane.submit(cost: cost, urgency: urgency) { _ in
                gate.add(name)
                gate.semaphore.wait()
            } dropped: { _ in gate.add("dropped \(name)") } timedOut: { gate.add("timeout \(name)") }
        }
        submit("first", cost: 10, Urgency(.normal))
        try await Self.wait { lane.load.running == 1 }
        let onScreen = Urgency(.low), scrolledAway = Urgency(.normal)
        submit("high", cost: 10, Urgency(.high))
        submit("cheap", cost: 1, scrolledAway)
        submit("on screen", cost: 50, onScreen)
        onScreen.focus()  // the page said: this tile is on screen now
        scrolledAway.focus()
        scrolledAway.unfocus()
        for _ in 0..<4 { gate.semaphore.signal() }
        try await Self.wait { lane.load.started == 4 && lane.load.running == 0 }
        #expect(gate.entries == ["first", "on screen", "high", "cheap"])
    }

    @Test("a task lets go of what its owner gave once it ran, was cancelled or dropped (no cycle keeps the original's bytes)")
    func releasesItsOwner() async throws {
        final class Owner: Sendable {}
        let lane = Self.lane(workers: 1, limit: .seconds(600))
        let gate = Gate()
        weak var ran: Owner?
        weak var cancelled: Owner?
        var tasks: [ResizeLane.Task?] = []
        do {
            let first = Owner(), second = Owner()
            ran = first
            cancelled = second
            tasks.append(lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in
                _ = first
                gate.semaphore.wait()
            } dropped: { _ in _ = first } timedOut: { _ = first })
            tasks.append(lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in _ = second } dropped: { _ in _ = second } timedOut: { _ = second })
        }
        try await Self.wait { lane.load.running == 1 }
        tasks[1]?.cancel()
        #expect(cancelled == nil)  // the queued task, cancelled: released at once
        gate.semaphore.signal()
        try await Self.wait { lane.load.running == 0 }
        #expect(ran == nil)  // the task that ran, still referenced here, holds nothing of it
        #expect(tasks.allSatisfy { $0 != nil })
    }

    @Test("resizes run at nice 10, on the lane's threads and libvips's own: the kernel runs the cheap work first")
    func niceness() async throws {
        // libvips starts its worker threads (at nice 0) the first time it computes.
        _ = try Thumbnailer().testImage(width: 64, height: 64)
        #expect(!ThreadPriority.niceness(ofThreadsNamed: ResizeLane.libvipsThreads).isEmpty)
        let lane = Self.lane(workers: 1, limit: .seconds(600))
        // libvips's workers as a resize starts: other tests running meanwhile start new ones
        // (at nice 0) at any time, even between the lane lowering them and this read, so a
        // resize may see one; a lane that lowered none would show them in every resize.
        var lowered = false
        for _ in 0..<5 where !lowered {
            let seen = Mutex<Int32?>(nil)
            let workers = Mutex<[Int32]>([])
            _ = lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in
                workers.withLock { $0 = ThreadPriority.niceness(ofThreadsNamed: ResizeLane.libvipsThreads) }
                seen.withLock { $0 = ThreadPriority.current }
            } dropped: { _ in } timedOut: {}
            try await Self.wait { seen.withLock { $0 } != nil }
            #expect(seen.withLock { $0 } == ResizeLane.defaultNiceness)
            lowered = !workers.withLock { $0 }.isEmpty && workers.withLock { $0 }.allSatisfy { $0 >= ResizeLane.defaultNiceness }
        }
        #expect(lowered)
        #expect(ThreadPriority.current == 0)  // this thread is untouched
        lane.stop()
    }

    @Test("admission by memory: two that do not fit the budget together run one after the other")
    func memory() async throws {
        let lane = Self.lane(workers: 2, memory: 100, limit: .seconds(600))
        let gate = Gate()
        let running = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        for name in ["a", "b"] {
            _ = lane.submit(cost: 60, urgency: Urgency(.normal)) { _ in
                let now = running.add(1, ordering: .relaxed).newValue
                _ = most.max(now, ordering: .relaxed)
                gate.add(name)
                gate.semaphore.wait()
                running.subtract(1, ordering: .relaxed)
            } dropped: { _ in } timedOut: {}
        }
        try await Self.wait { gate.entries.count == 1 }
        #expect(lane.load.running == 1 && lane.load.queued == 1)  // a worker is free, the memory is not
        gate.semaphore.signal()
        try await Self.wait { gate.entries.count == 2 }
        gate.semaphore.signal()
        try await Self.wait { lane.load.running == 0 }
        #expect(most.load(ordering: .relaxed) == 1)
    }

    @Test("a cancelled queued task never runs; a cancelled running one sees its control cancelled")
    func cancel() async throws {
        let lane = Self.lane(workers: 1, limit: .seconds(600))  // no watchdog here, however slow the machine
        let gate = Gate()
        let seen = Mutex<ResizeControl?>(nil)
        let running = lane.submit(cost: 1, urgency: Urgency(.normal)) { control in
            seen.withLock { $0 = control }
            gate.add("running")
            while !control.isCancelled { usleep(1_000) }
            gate.add("stopped")
        } dropped: { _ in } timedOut: {}
        let queued = lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in gate.add("never") } dropped: { _ in } timedOut: {}
        try await Self.wait { gate.entries == ["running"] }
        queued?.cancel()
        running?.cancel()
        try await Self.wait { lane.load.running == 0 }
        #expect(gate.entries == ["running", "stopped"])
        #expect(seen.withLock { $0?.isCancelled } == true)
    }

    @Test("the watchdog answers a task that does not return in time, which keeps its worker until it does")
    func watchdog() async throws {
        let lane = Self.lane(workers: 1, limit: .milliseconds(100))
        let gate = Gate()
        _ = lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in
            gate.semaphore.wait()  // one call libvips cannot stop
        } dropped: { _ in } timedOut: { gate.add("timed out") }
        try await Self.wait { gate.entries == ["timed out"] }
        #expect(lane.load.running == 1)
        gate.semaphore.signal()
        try await Self.wait { lane.load.running == 0 }
    }

    @Test("the watchdog marks the time-out before it stops the resize: its waiters are answered resize_timeout, never shutting_down")
    func watchdogAnswersFirst() async throws {
        let lane = Self.lane(workers: 1, limit: .milliseconds(50))
        let running = Mutex<ResizeControl?>(nil)
        let gate = Gate()
        _ = lane.submit(cost: 1, urgency: Urgency(.normal)) { control in
            running.withLock { $0 = control }
            // A resize that stops at its next tile once cancelled, and then reports so (as
            // the variant source answers a cancelled resize: shutting_down).
            let deadline = ContinuousClock.now + .seconds(10)
            while !control.isCancelled, ContinuousClock.now < deadline { usleep(200) }
        } dropped: { _ in } timedOut: {
            // The owner answers the timeout first: the resize must not have been stopped yet,
            // or its own answer could race ahead of this one.
            gate.add(running.withLock { $0?.isCancelled == true } ? "cancelled first" : "timed out first")
        }
        try await Self.wait { !gate.entries.isEmpty }
        #expect(gate.entries == ["timed out first"])
        try await Self.wait { lane.load.running == 0 }
        #expect(running.withLock { $0?.isCancelled } == true)  // and then it is stopped
    }

    @Test("stop answers the queued tasks shutting_down and refuses new ones")
    func stop() async throws {
        // stop() waits up to the time limit + 1 s for the running task to see its cancel: the
        // lane's thread runs at nice 10, and with the whole suite on two cores 1.2 s was
        // once not enough for it to be scheduled.
        let lane = Self.lane(workers: 1, limit: .seconds(10))
        let gate = Gate()
        _ = lane.submit(cost: 1, urgency: Urgency(.normal)) { control in
            while !control.isCancelled { usleep(1_000) }
        } dropped: { _ in } timedOut: {}
        _ = lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in gate.add("never") } dropped: { gate.add("dropped \($0.code)") } timedOut: {}
        try await Self.wait { lane.load.running == 1 }
        lane.stop()
        #expect(gate.entries == ["dropped shutting_down"])
        #expect(lane.load.running == 0)
        #expect(lane.submit(cost: 1, urgency: Urgency(.normal)) { _ in } dropped: { _ in } timedOut: {} == nil)
    }
}
