import Testing
@testable import Upstream

/// Upstream admission without curl: the concurrency limits, per-host limits and priority order
/// the transfer loop applies.
@Suite("Admission")
struct AdmissionTests {
    final class Job: CustomStringConvertible {
        let name: String
        let host: String
        let urgency: Urgency
        init(_ name: String, _ host: String, _ priority: Priority = .normal) {
            self.name = name
            self.host = host
            self.urgency = Urgency(priority)
        }
        var description: String { name }
    }

    func admission(concurrent: Int, perHost: Int) -> Admission<Job> {
        Admission(maxConcurrent: concurrent, maxPerHost: perHost, host: { $0.host }, rank: { $0.urgency.rank })
    }

    @Test("at most maxConcurrent run; freed slots go to the next, oldest first")
    func concurrency() {
        var a = admission(concurrent: 2, perHost: 10)
        let jobs = (0..<4).map { Job("j\($0)", "h\($0)") }
        jobs.forEach { a.enqueue($0) }
        let first = a.admit()
        #expect(first.map(\.name) == ["j0", "j1"])
        let none = a.admit()
        #expect(none.isEmpty)
        a.finished(jobs[1])
        let next = a.admit()
        #expect(next.map(\.name) == ["j2"])
        #expect(a.running == 2 && a.queued.map(\.name) == ["j3"])
    }

    @Test("at most maxPerHost per host; other hosts pass a busy one")
    func perHost() {
        var a = admission(concurrent: 10, perHost: 2)
        let same = (0..<3).map { Job("a\($0)", "a.example") }
        let other = Job("b0", "b.example")
        (same + [other]).forEach { a.enqueue($0) }
        let started = a.admit()
        #expect(started.map(\.name) == ["a0", "a1", "b0"])
        #expect(a.runningOn("a.example") == 2)
        a.finished(same[0])
        let freed = a.admit()
        #expect(freed.map(\.name) == ["a2"])
        a.finished(other)
        #expect(a.runningOn("b.example") == 0)
    }

    @Test("higher priority first, oldest first within one; a priority that rises while queued counts")
    func priority() {
        var a = admission(concurrent: 1, perHost: 10)
        let low = Job("low", "h", .low)
        let normal1 = Job("normal1", "h")
        let normal2 = Job("normal2", "h")
        let high = Job("high", "h", .high)
        [low, normal1, normal2, high].forEach { a.enqueue($0) }
        var order: [String] = []
        for _ in 0..<4 {
            let started = a.admit()
            order += started.map(\.name)
            if order.count == 1 { low.urgency.raise(to: .high) }  // a high-priority waiter joined the low fetch
            started.forEach { a.finished($0) }
        }
        #expect(order == ["high", "low", "normal1", "normal2"])
    }

    @Test("a focused job goes before every unfocused one, high priority included; unfocused, it falls back")
    func focus() {
        var a = admission(concurrent: 1, perHost: 10)
        let high = Job("high", "h", .high)
        let normal = Job("normal", "h")
        let low = Job("low", "h", .low)
        let later = Job("later", "h")
        [high, normal, low, later].forEach { a.enqueue($0) }
        low.urgency.focus()  // a batch's low-priority item came on screen
        later.urgency.focus()
        later.urgency.unfocus()  // ... and this one left it again
        var order: [String] = []
        for _ in 0..<4 {
            let started = a.admit()
            order += started.map(\.name)
            started.forEach { a.finished($0) }
        }
        #expect(order == ["low", "high", "normal", "later"])
        let twice = Urgency(.normal)
        twice.focus()
        twice.focus()
        twice.unfocus()
        #expect(twice.isFocused)  // two batches showed it; one still does
        twice.unfocus()
        twice.unfocus()  // more unfocus than focus never goes below none
        #expect(!twice.isFocused && twice.rank == Urgency(.normal).rank)
    }

    @Test("a queued job can be taken out (cancel) and the queue emptied (shutdown)")
    func removal() {
        var a = admission(concurrent: 1, perHost: 1)
        let jobs = (0..<3).map { Job("j\($0)", "h") }
        jobs.forEach { a.enqueue($0) }
        let running = a.admit()
        #expect(running.map(\.name) == ["j0"])
        let taken = a.removeQueued(jobs[1])
        #expect(taken)
        let takenAgain = a.removeQueued(jobs[1])
        #expect(!takenAgain)
        let takenRunning = a.removeQueued(jobs[0])
        #expect(!takenRunning)  // running, not queued
        let left = a.removeAllQueued()
        #expect(left.map(\.name) == ["j2"])
        #expect(a.queued.isEmpty && a.running == 1)
    }
}
