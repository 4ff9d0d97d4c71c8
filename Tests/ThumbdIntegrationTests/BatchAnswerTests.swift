import EventStream
import Foundation
import LoopbackClient
import Testing
import Support
import ThumbdTesting

/// The 201 of `POST /batches` carries the events already in the batch's log, so a client
/// has a warm batch at once and reads the stream only for what is still to come.
@Suite("The answer to POST /batches")
struct BatchAnswerTests {
    /// The answer's `log`, as the stream's events.
    static func logged(_ answer: [String: Any]) throws -> [EventStreamParser.Event] {
        let log = try #require(answer["log"] as? [[String: Any]])
        return try log.map { entry in
            let data = try JSONSerialization.data(withJSONObject: try #require(entry["data"]), options: [.sortedKeys])
            return EventStreamParser.Event(type: try #require(entry["event"] as? String), data: String(decoding: data, as: UTF8.self),
                                           lastEventID: String(try #require(entry["id"] as? Int)))
        }
    }

    /// The same events with their data in one spelling (keys sorted), to compare with the answer's.
    static func normalized(_ events: [EventStreamParser.Event]) -> [EventStreamParser.Event] {
        events.map { event in
            let object = (try? JSONSerialization.jsonObject(with: Data(event.data.utf8))) ?? [:]
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            return EventStreamParser.Event(type: event.type, data: String(decoding: data, as: UTF8.self), lastEventID: event.lastEventID)
        }
    }

    static func post(_ daemon: TestDaemon, _ urls: [String]) async throws -> [String: Any] {
        let items = urls.map { "{\"url\":\(jsonString($0))}" }.joined(separator: ",")
        let answer = try await request(daemon.port, "/batches", method: "POST", headers: ["Content-Type": "application/json"],
                                       body: "{\"items\":[\(items)]}")
        #expect(answer.status == 201, "\(answer.text)")
        return answer.json
    }

    @Test("a batch of cached items is all in its 201, end included, as the stream has it; the stream after lastEventId adds nothing")
    func warm() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let urls = [origin.url("/img/a1.jpg"), origin.url("/img/a2.jpg")]
            for url in urls { #expect(try await request(daemon.port, "/thumb?url=" + QueryValue.encode(url)).status == 200) }
            let answer = try await Self.post(daemon, urls + ["ftp://example.org/x.jpg"])
            let logged = try Self.logged(answer)
            #expect(logged.map(\.type).sorted() == ["done", "done", "end", "failed"])
            #expect(logged.last?.type == "end")
            #expect(logged.filter { $0.type == "done" }.allSatisfy { ["hit", "coalesced"].contains(payload($0)["cache"] as? String) })
            #expect(answer["lastEventId"] as? Int == Int(logged.last?.lastEventID ?? ""))
            let events = try #require(answer["events"] as? String)
            let stream = try await daemon.allEvents(events)
            #expect(Self.normalized(stream.parser.events) == logged)
            let after = try await daemon.allEvents(events, lastEventID: logged.last?.lastEventID)
            #expect(after.parser.events.isEmpty && after.closedByServer)
        }
    }

    @Test("a batch still working has in its 201 what happened so far; the stream after lastEventId has the rest, no gap, no duplicate")
    func partly() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let cached = origin.url("/img/p1.jpg")
            #expect(try await request(daemon.port, "/thumb?url=" + QueryValue.encode(cached)).status == 200)
            let answer = try await Self.post(daemon, [cached, origin.url("/gate/answer")])
            let logged = try Self.logged(answer)
            #expect(logged.map(\.type) == ["done"])
            #expect(answer["lastEventId"] as? Int == Int(logged.last?.lastEventID ?? ""))
            let events = try #require(answer["events"] as? String)
            try await origin.release("answer")
            let rest = try await daemon.allEvents(events, lastEventID: logged.last?.lastEventID)
            let full = try await daemon.allEvents(events)
            #expect(logged + Self.normalized(rest.parser.events) == Self.normalized(full.parser.events))
            #expect(rest.parser.events.last?.type == "end")
        }
    }
}
