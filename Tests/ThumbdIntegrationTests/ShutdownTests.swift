import Foundation
import InMemoryLogging
import Logging
import ServiceLifecycle
import Synchronization
import Testing
import ThumbdTesting
@testable import ThumbdCore

@Suite("Graceful shutdown")
struct ShutdownTests {
    @Test("a waiting client gets an answer, the process survives, and the cache keeps what was stored")
    func shutdownWithWaiters() async throws {
        try await withOriginAndDaemon { origin, daemon in
            _ = try await request(daemon.port, origin.thumb("/img/kept.jpg"))
            let waiting = try RawConnection(port: daemon.port)
            try waiting.send("GET", origin.thumb("/gate/never"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
            try await blocking { daemon.stop() }  // grace 0.5 s, then abort: must not crash libmicrohttpd
            let answer = try await blocking { try waiting.read() }
            #expect(answer.status == 503)
            #expect(answer.errorCode == "shutting_down")

            let restarted = try TestDaemon(directory: daemon.directory)
            defer { restarted.stop() }
            let hit = try await request(restarted.port, origin.thumb("/img/kept.jpg"))
            #expect(hit[header: "X-Thumbd-Cache"] == "hit")
        }
    }

    @Test("a request that would wait, on a connection open before the stop, is answered 503 with its X-Request-Id")
    func waitRefusedDuringShutdown() async throws {
        try await withOriginAndDaemon({ $0.server.shutdownGraceSeconds = 10 }) { origin, daemon in
            let waiting = try RawConnection(port: daemon.port)
            try waiting.send("GET", origin.thumb("/gate/held"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
            let kept = try RawConnection(port: daemon.port, timeoutSeconds: 5)
            try kept.send("GET", "/healthz")
            #expect(try await blocking { try kept.read() }.status == 200)  // kept alive
            let port = daemon.port
            async let stopped: Void = blocking { daemon.stop() }  // the held fetch keeps it in its grace period
            var stopping = false
            for _ in 0..<100 where !stopping {
                stopping = try await blocking {
                    let connection = try RawConnection(port: port, timeoutSeconds: 5)
                    try connection.send("GET", "/healthz")
                    return try connection.read().status == 503
                }
                if !stopping { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(stopping)
            try kept.send("GET", origin.thumb("/gate/late"))  // a miss: it would wait for the origin
            let answer = try await blocking { try kept.read() }
            #expect(answer.status == 503)
            #expect(answer.errorCode == "shutting_down")
            #expect(answer[header: "X-Request-Id"] != nil)
            try await origin.release("held")
            try await stopped
        }
    }

    @Test("while it stops, a new client is answered 503 shutting_down at once, and the stop completes")
    func newClientDuringShutdown() async throws {
        // The grace period is the window in which a new client must be seen answered: long
        // enough that a loaded machine's late threads still land in it.
        try await withOriginAndDaemon({ $0.server.shutdownGraceSeconds = 10 }) { origin, daemon in
            let waiting = try RawConnection(port: daemon.port)
            try waiting.send("GET", origin.thumb("/gate/stopping"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
            let port = daemon.port
            async let stopped: Void = blocking { daemon.stop() }  // the fetch holds it in its grace period
            // The stop runs on a thread of its own, which a loaded machine may start late: new
            // clients are tried until the stop has begun (each answered at once either way).
            var late: HTTPResult?
            for _ in 0..<100 {
                // Timed inside the thread that asks: a loaded test process may start that thread late.
                let (answer, took) = try await blocking { () -> (HTTPResult, Duration) in
                    let started = ContinuousClock.now
                    let connection = try RawConnection(port: port, timeoutSeconds: 5)
                    try connection.send("GET", "/healthz")
                    return (try connection.read(), ContinuousClock.now - started)
                }
                #expect(took < .seconds(4))  // not held to the client's 5 s timeout
                if answer.status != 200 { late = answer; break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(late?.status == 503)
            #expect(late?.errorCode == "shutting_down")
            try await stopped
            #expect(try await blocking { try waiting.read() }.status == 503)
        }
    }

    @Test("an event stream whose client stopped reading mid-event does not hold up shutdown")
    func shutdownWithFullStream() async throws {
        try await withOriginAndDaemon(TestDaemon.forFloods) { origin, daemon in
            // A client that reads nothing: its socket fills, most likely in the middle of a
            // chunk the stream wrote itself.
            let batch = try await daemon.createFloodBatch(origin: origin, gate: "full-stream")
            let stuck = try await blocking {
                try EventStreamClient(port: daemon.port, path: batch.events, receiveBuffer: 64 * 1024)
            }
            try await origin.release("full-stream")
            #expect(try await eventually(30) { daemon.thumbd.fetchesInFlight == 0 })  // every item done
            // The server gives open answers 5 s, then stops: libmicrohttpd would abort the
            // process if the stream were still suspended. A stop held up by the client would
            // last until the client goes, so the client goes after 30 s whatever happens (the
            // test then fails instead of hanging); a loaded machine adds seconds to the 5, never 25.
            let watchdog = Task {
                try await Task.sleep(for: .seconds(30))
                stuck.close()
            }
            let started = ContinuousClock.now
            try await blocking { daemon.stop() }
            let took = ContinuousClock.now - started
            watchdog.cancel()
            _ = await watchdog.result
            #expect(took < .seconds(30), "\(took)")
            stuck.close()
        }
    }

    @Test("thumbd serve's group: one service per part, stopped in the reverse order of their start, waiters answered")
    func partsAsServices() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let services = daemon.thumbd.services
            #expect(services.map(\.description) == [
                "store", "memory trimmer", "event keepalives", "http server", "event streams", "processing", "transfers", "intake",
            ])
            let log = InMemoryLogHandler()
            var logger = Logger(label: "test.group") { _ in log }
            logger.logLevel = .debug
            let group = daemon.thumbd.serviceGroup(logger: logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                let waiting = try RawConnection(port: daemon.port)
                try waiting.send("GET", origin.thumb("/gate/parts"))
                #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
                await group.triggerGracefulShutdown()
                try await tasks.next()  // every part has stopped
                let answer = try await blocking { try waiting.read() }
                #expect(answer.status == 503 && answer.errorCode == "shutting_down")
            }
            let stopped = log.entries.filter { "\($0.message)".hasPrefix("Triggering graceful shutdown") }
                .compactMap { $0.metadata["sl-service"].map { "\($0)" } }
            #expect(stopped == services.reversed().map(\.description))
        }
    }

    @Test("a part that fails to start stops the ones before it in reverse, starts none after it; on a thread and in the group",
          arguments: [false, true])
    func failedStart(inGroup: Bool) async throws {
        let origin = try await TestOrigin()  // its port is taken: `/metrics`'s own listener fails
        defer { origin.stop() }
        let log = InMemoryLogHandler()
        var logger = Logger(label: "thumbd.test") { _ in log }
        logger.logLevel = .debug
        let test = try TestDaemon(start: false, logger: logger) { $0.metrics.listen = "127.0.0.1:\(origin.port)" }
        defer { test.remove() }
        if inGroup {
            try test.thumbd.build()
            let group = test.thumbd.serviceGroup(logger: logger)
            let ready = Task { await test.thumbd.started() }
            await #expect(throws: ThumbdError.self) { try await group.run() }
            #expect(await ready.value == false)
            // The server listens last: no request could reach a part that had not started.
            #expect(test.thumbd.port == 0)
        } else {
            #expect(throws: ThumbdError.self) { try test.thumbd.start() }
        }
        #expect(!test.thumbd.isRunning)
        let before = ["store", "memory trimmer", "event keepalives", "http server", "event streams", "processing", "transfers"]
        #expect(Self.parts(log, "thumbd.part.started") == before)  // neither `/metrics` nor intake (the listen)
        #expect(Self.parts(log, "thumbd.part.stopped") == before.reversed())
        // The cache file was given back: another daemon starts on it.
        let again = try TestDaemon(directory: test.directory)
        #expect(try await request(again.port, "/healthz").status == 200)
        again.stop()
    }

    /// The parts named by the log's `message` entries, in order.
    static func parts(_ log: InMemoryLogHandler, _ message: String) -> [String] {
        log.entries.filter { "\($0.message)" == message }.compactMap { $0.metadata["part"].map { "\($0)" } }
    }

    @Test("as a service: the group's graceful shutdown answers the waiters, stops the daemon and ends run()")
    func serviceGroup() async throws {
        let origin = try await TestOrigin()
        defer { origin.stop() }
        let test = try TestDaemon(start: false)
        defer { test.remove() }
        let group = ServiceGroup(configuration: .init(services: [.init(service: test.thumbd)], logger: Logger(label: "test")))
        // How run() ended, if it did: a start that fails ends it at once, and the test says why
        // instead of waiting out its bound.
        final class Ended: Sendable { let how = Mutex<String?>(nil) }
        let ended = Ended()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                do {
                    try await group.run()
                    ended.how.withLock { $0 = "returned" }
                } catch {
                    ended.how.withLock { $0 = "threw \(error)" }
                    throw error
                }
            }
            // A generous bound: with every suite running at once on two cores, the group's task
            // and the start it hands to its queue may each wait behind hundreds of others
            // (CI once saw 30 s pass before the start had run).
            _ = try await eventually(120) { test.thumbd.isRunning || ended.how.withLock { $0 != nil } }
            try #require(test.thumbd.isRunning, "run() \(ended.how.withLock { $0 } ?? "has not started the daemon in 120 s")")
            let waiting = try RawConnection(port: test.port)
            try waiting.send("GET", origin.thumb("/gate/service"))
            #expect(try await eventually { test.thumbd.waitingRequests == 1 })
            await group.triggerGracefulShutdown()
            try await tasks.next()  // run() returned: the daemon has stopped
            #expect(!test.thumbd.isRunning)
            let answer = try await blocking { try waiting.read() }
            #expect(answer.status == 503)
            #expect(answer.errorCode == "shutting_down")
        }
    }

    @Test("in the group, each part starts once the one before it has, and the daemon is ready after the last")
    func groupStartsInOrder() async throws {
        let log = InMemoryLogHandler()
        var logger = Logger(label: "thumbd.test") { _ in log }
        logger.logLevel = .debug
        let test = try TestDaemon(start: false, logger: logger)
        defer { test.remove() }
        try test.thumbd.build()
        let names = test.thumbd.services.map(\.description)
        let group = test.thumbd.serviceGroup(logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // A bound, not a hope: a start that never completes fails the test instead of hanging it.
            let ready = Task { await test.thumbd.started() }
            let watchdog = Task {
                try await Task.sleep(for: .seconds(120))
                await group.triggerGracefulShutdown()
            }
            #expect(await ready.value)
            watchdog.cancel()
            #expect(test.thumbd.isRunning)
            #expect(try await request(test.thumbd.port, "/healthz").status == 200)
            await group.triggerGracefulShutdown()
            try await tasks.next()
        }
        #expect(Self.parts(log, "thumbd.part.started") == names)
        #expect(Self.parts(log, "thumbd.part.stopped") == names.reversed())
    }
}
