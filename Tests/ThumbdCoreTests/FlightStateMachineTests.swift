import Dispatch
import Foundation
import Synchronization
import Testing
import Support
import Thumbnailer
import Upstream
import BlobStore
@testable import ThumbdCore

/// Every transition of one flight, as a value: no lock, no socket, no thread.
@Suite("FlightStateMachine")
struct FlightStateMachineTests {
    final class Job: Sendable {}

    static func object(_ key: String = "k") -> CachedObject {
        CachedObject(key: key, url: key, status: 200, contentType: "image/png", body: Bytes([1]), etag: "\"e\"", fetchedAt: 0, expiresAt: 1)
    }

    @Test("join while running waits (and raises the job's priority); join once finished answers at once while its object is fresh, and is replaced once it has expired")
    func join() {
        let job = Job()
        var flight = FlightStateMachine(job: job, leader: 1) { _, _ in }
        guard case .wait(let raised) = flight.join(token: 2, waiter: { _, _ in }, now: 0) else { Issue.record("not waiting"); return }
        #expect(raised === job)
        #expect(flight.waiterCount == 2)
        guard case .answer(let waiters, remove: false) = flight.complete(with: .success(Self.object()), keep: true) else {
            Issue.record("not answered"); return
        }
        #expect(waiters.map(\.1).sorted { "\($0)" < "\($1)" } == [.follower, .leader])
        guard case .answer(.success(let object)) = flight.join(token: 3, waiter: { _, _ in }, now: 0) else { Issue.record("not ready"); return }
        #expect(object.key == "k")
        // Once the object has expired (it did at 1), the kept flight is no hit: it is replaced.
        guard case .replace = flight.join(token: 4, waiter: { _, _ in }, now: 1) else { Issue.record("an expired hit"); return }
        var failed = FlightStateMachine(job: Job(), leader: 1) { _, _ in }
        _ = failed.complete(with: .failure(.shuttingDown), keep: true)
        guard case .answer(.failure) = failed.join(token: 2, waiter: { _, _ in }, now: 1) else { Issue.record("not answered"); return }
    }

    @Test("leave: the last waiter abandons an abandonable flight; a flight that is not, stays")
    func leave() {
        var flight = FlightStateMachine(job: Job(), leader: 1) { _, _ in }
        _ = flight.join(token: 2, waiter: { _, _ in }, now: 0)
        #expect(flight.leave(token: 1, abandonable: true) == .stay)
        #expect(flight.leave(token: 1, abandonable: true) == .none)  // twice is harmless
        #expect(flight.leave(token: 9, abandonable: true) == .none)  // never a waiter
        #expect(flight.leave(token: 2, abandonable: true) == .abandon)
        var kept = FlightStateMachine(job: Job(), leader: 1) { _, _ in }
        #expect(kept.leave(token: 1, abandonable: false) == .stay)  // runs on for the cache
        #expect(kept.waiterCount == 0)
    }

    @Test("complete answers once: a second completion (a late result after the watchdog's) does nothing")
    func completeOnce() {
        var flight = FlightStateMachine(job: Job(), leader: 1) { _, _ in }
        guard case .answer(let first, remove: true) = flight.complete(with: .failure(.shuttingDown), keep: false) else {
            Issue.record("not answered"); return
        }
        #expect(first.count == 1 && first[0].1 == .leader)
        guard case .none = flight.complete(with: .success(Self.object()), keep: true) else { Issue.record("answered twice"); return }
        #expect(flight.leave(token: 1, abandonable: true) == .none)  // leaving a finished flight: nothing
    }

    @Test("release only ends a finished flight")
    func release() {
        var flight = FlightStateMachine(job: Job(), leader: 1) { _, _ in }
        #expect(!flight.canRelease)
        _ = flight.complete(with: .success(Self.object()), keep: true)
        #expect(flight.canRelease && flight.isFinished)
    }
}
