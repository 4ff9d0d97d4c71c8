import Foundation
import Testing
import ThumbdTesting

@Suite("Coalescing: one upstream fetch per key")
struct CoalescingTests {
    @Test("100 concurrent clients on one cold URL cause one origin request and one miss")
    func hundredClients() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let target = origin.thumb("/gate/hundred")
            let results = try await blocking { () -> [HTTPResult] in
                let connections = try (0..<100).map { _ in try RawConnection(port: daemon.port) }
                for connection in connections { try connection.send("GET", target) }
                // Every request must be waiting in thumbd before the origin answers.
                let deadline = Date().addingTimeInterval(10)
                while daemon.thumbd.waitingRequests < 100 && Date() < deadline { usleep(5_000) }
                return try connections.map { connection in
                    if connection === connections.first { try blockingRelease(origin, "hundred") }
                    return try connection.read()
                }
            }
            #expect(results.count == 100)
            #expect(results.allSatisfy { $0.status == 200 })
            let labels = results.map { $0[header: "X-Thumbd-Cache"] ?? "none" }
            #expect(labels.filter { $0 == "miss" }.count == 1)
            #expect(labels.filter { $0 == "coalesced" }.count == 99)
            let body = try await origin.direct("/gate/hundred")
            #expect(results.allSatisfy { $0.body == body })
            #expect(try await origin.requests("/gate/hundred") == 1)
        }
    }

    @Test("a sole waiter that hangs up aborts the upstream transfer")
    func soleWaiterLeaves() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let connection = try RawConnection(port: daemon.port)
            try connection.send("GET", origin.thumb("/gate/alone"))
            #expect(try await eventually { try await origin.requests("/gate/alone") == 1 })
            connection.close()
            #expect(try await eventually { try await origin.aborted("/gate/alone") == 1 })
            #expect(try await eventually { daemon.thumbd.fetchesInFlight == 0 && daemon.thumbd.waitingRequests == 0 })
        }
    }

    @Test("one of two waiters hangs up; the other still gets the image")
    func oneOfTwoLeaves() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let leaving = try RawConnection(port: daemon.port)
            let staying = try RawConnection(port: daemon.port)
            try leaving.send("GET", origin.thumb("/gate/two"))
            try staying.send("GET", origin.thumb("/gate/two"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 2 })
            leaving.close()
            #expect(try await eventually { daemon.thumbd.waitingRequests == 1 })
            try await origin.release("two")
            let result = try await blocking { try staying.read() }
            #expect(result.status == 200)
            #expect(try await origin.aborted("/gate/two") == 0)
            #expect(try await origin.requests("/gate/two") == 1)
        }
    }

    @Test("with abortWhenAbandoned off, an abandoned fetch completes and is cached")
    func abandonedFetchKept() async throws {
        try await withOriginAndDaemon({ $0.upstream.abortWhenAbandoned = false }) { origin, daemon in
            let connection = try RawConnection(port: daemon.port)
            try connection.send("GET", origin.thumb("/gate/kept"))
            #expect(try await eventually { try await origin.requests("/gate/kept") == 1 })
            connection.close()
            #expect(try await eventually { daemon.thumbd.waitingRequests == 0 })
            try await origin.release("kept")
            #expect(try await eventually { daemon.thumbd.fetchesInFlight == 0 })
            let later = try await request(daemon.port, origin.thumb("/gate/kept"))
            #expect(later[header: "X-Thumbd-Cache"] == "hit")
            #expect(try await origin.aborted("/gate/kept") == 0)
        }
    }

    @Test("queued fetches start by priority, and a fetch takes its highest waiter's priority")
    func priorityOrder() async throws {
        try await withOriginAndDaemon({ $0.upstream.maxConcurrent = 1 }) { origin, daemon in
            let blocker = try RawConnection(port: daemon.port)
            try blocker.send("GET", origin.thumb("/gate/first"))
            #expect(try await eventually { try await origin.requests("/gate/first") == 1 })
            var connections: [RawConnection] = []
            for (path, priority) in [("/img/low.jpg", "low"), ("/img/normal.jpg", "normal"),
                                     ("/img/high.jpg", "high"), ("/img/raised.jpg", "low")] {
                let connection = try RawConnection(port: daemon.port)
                try connection.send("GET", origin.thumb(path, "&priority=\(priority)"))
                connections.append(connection)
                let expected = connections.count + 1
                #expect(try await eventually { daemon.thumbd.waitingRequests == expected })
            }
            let booster = try RawConnection(port: daemon.port)  // a high-priority waiter joins "raised"
            try booster.send("GET", origin.thumb("/img/raised.jpg", "&priority=high"))
            #expect(try await eventually { daemon.thumbd.waitingRequests == 6 })
            try await origin.release("first")
            for connection in connections + [booster, blocker] {
                let result = try await blocking { try connection.read() }
                #expect(result.status == 200)
            }
            let order = try await origin.stats().order
            #expect(order == ["/gate/first", "/img/high.jpg", "/img/raised.jpg", "/img/normal.jpg", "/img/low.jpg"])
        }
    }
}

/// Releases an origin gate from a blocking context.
func blockingRelease(_ origin: TestOrigin, _ gate: String) throws {
    let connection = try RawConnection(port: origin.port)
    defer { connection.close() }
    try connection.send("GET", "/__release/\(gate)")
    _ = try connection.read()
}
