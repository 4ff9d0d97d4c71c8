import Synchronization
import Testing
import Support
import Upstream
import BlobStore
@testable import ThumbdCore

@Suite("FetchCoalescer")
struct FetchCoalescerTests {
    final class Log: Sendable {
        let entries = Mutex<[String]>([])
        func add(_ text: String) { entries.withLock { $0.append(text) } }
        var all: [String] { entries.withLock { $0.sorted() } }
    }

    func job(_ url: String = "http://example.org/a") -> FetchJob {
        FetchJob(url: url, host: "example.org", priority: .low) { _, _ in }
    }

    func object(_ key: String) -> CachedObject {
        CachedObject(key: key, url: key, status: 200, contentType: "image/png", body: Bytes([1]), etag: "\"e\"", fetchedAt: 0, expiresAt: 1)
    }

    @Test("the first asker leads, later ones follow, and all get the outcome with their role")
    func rolesAndDelivery() throws {
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let log = Log()
        var made = 0
        let first = coalescer.join(key: "k", priority: .low, now: 0, waiter: { _, role in log.add("a:\(role)") }) { made += 1; return job() }
        let second = coalescer.join(key: "k", priority: .high, now: 0, waiter: { _, role in log.add("b:\(role)") }) { made += 1; return job() }
        #expect(made == 1)
        #expect(first.role == .leader && first.job != nil)
        #expect(second.role == .follower && second.job == nil)
        let running = try #require(first.job)
        #expect(running.priority == .high)  // raised by the second waiter
        coalescer.complete(key: "k", job: running, with: .success(object("k")))
        #expect(log.all == ["a:leader", "b:follower"])
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("joining and leaving a crowded flight costs the same for each waiter, not more with every one before it")
    func crowdedFlightStaysLinear() throws {
        // Each join and each leave once copied the whole waiting list (the map's copy of the
        // flight kept the list shared while it changed): 20,000 waiters cost 200 million
        // entry copies, and 40,000 took a minute; linear, they take well under a second
        // even unoptimised.
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let waiters = 40_000
        let clock = ContinuousClock()
        let started = clock.now
        let tickets = (0..<waiters).map { _ in coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }.ticket }
        #expect(coalescer.waiterCount(key: "k") == waiters)
        for ticket in tickets.dropLast() { #expect(coalescer.leave(ticket) == nil) }
        #expect(coalescer.leave(try #require(tickets.last)) != nil)
        #expect(clock.now - started < .seconds(20))  // quadratic, a minute
    }

    @Test("the last waiter leaving hands back the job to cancel; earlier leavers do not")
    func leaving() throws {
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let a = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        let b = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        #expect(coalescer.leave(a.ticket) == nil)
        #expect(coalescer.leave(a.ticket) == nil)  // twice is harmless
        #expect(coalescer.leave(b.ticket) === a.job)
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("without abortWhenAbandoned the flight stays and completes normally")
    func keepAbandoned() {
        let coalescer = FetchCoalescer(abortWhenAbandoned: false)
        let a = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        #expect(coalescer.leave(a.ticket) == nil)
        #expect(coalescer.inFlightCount == 1)
    }

    @Test("a kept flight answers newcomers at once until it is released")
    func keptFlight() throws {
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let log = Log()
        let first = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, role in log.add("first:\(role)") }) { job() }
        let running = try #require(first.job)
        coalescer.complete(key: "k", job: running, with: .success(object("k")), keep: true)
        #expect(log.all == ["first:leader"])
        let late = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in log.add("late waited") }) { job() }
        #expect(late.role == .finished && late.job == nil)  // answered as a hit: nothing is in flight
        #expect((try? late.ready?.get()) == object("k"))
        #expect(coalescer.leave(first.ticket) == nil)  // nothing left to cancel
        coalescer.complete(key: "k", job: running, with: .failure(.cancelled))  // a second completion is ignored
        coalescer.release(key: "k", job: running)
        #expect(coalescer.inFlightCount == 0)
        let next = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        #expect(next.role == .leader)
        #expect(log.all == ["first:leader"])
    }

    @Test("a kept flight whose object has expired (max-age=0) is no hit: a newcomer leads a new flight, which the old release leaves alone")
    func keptExpiredFlight() throws {
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let first = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        let running = try #require(first.job)
        coalescer.complete(key: "k", job: running, with: .success(object("k")), keep: true)  // expires at 1
        let fresh = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in }) { job() }
        #expect(fresh.role == .finished)
        let late = coalescer.join(key: "k", priority: .normal, now: 1, waiter: { _, _ in }) { job() }
        let replacing = try #require(late.job)
        #expect(late.role == .leader && late.ready == nil && replacing !== running)
        coalescer.release(key: "k", job: running)  // the store committed the old object
        #expect(coalescer.job(for: "k") === replacing)
        let follower = coalescer.join(key: "k", priority: .normal, now: 1, waiter: { _, _ in }) { job() }
        #expect(follower.role == .follower)
        coalescer.complete(key: "k", job: replacing, with: .failure(.cancelled))
        #expect(coalescer.inFlightCount == 0)
    }

    @Test("a completion from an abandoned job does not touch the flight that replaced it")
    func staleCompletion() throws {
        let coalescer = FetchCoalescer(abortWhenAbandoned: true)
        let log = Log()
        let old = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in log.add("old") }) { job() }
        _ = coalescer.leave(old.ticket)
        let new = coalescer.join(key: "k", priority: .normal, now: 0, waiter: { _, _ in log.add("new") }) { job() }
        coalescer.complete(key: "k", job: try #require(old.job), with: .failure(.cancelled))
        #expect(log.all.isEmpty)
        coalescer.complete(key: "k", job: try #require(new.job), with: .success(object("k")))
        #expect(log.all == ["new"])
    }

    @Test("each way of meeting a flight has its X-Thumbd-Cache label")
    func labels() {
        var revalidated = object("k")
        revalidated.revalidated = true
        #expect(CacheResult.of(.leader, object("k")) == .miss)
        #expect(CacheResult.of(.leader, revalidated) == .revalidated)
        #expect(CacheResult.of(.follower, object("k")) == .coalesced)
        #expect(CacheResult.of(.finished, object("k")) == .hit)  // finished, being stored: what the cache holds
        #expect(CacheResult.of(.finished, nil) == .hit)
    }
}
