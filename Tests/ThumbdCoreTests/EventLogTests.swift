import Foundation
import Testing
import HTTPServer
@testable import ThumbdCore

/// The event log and its readers without sockets: ids, replay, Last-Event-ID, reading in
/// parts, compaction of a finished log, and when streams may close.
@Suite("EventLog and EventSubscriber")
struct EventLogTests {
    final class NoWaker: StreamWaker, @unchecked Sendable {
        var wakes = 0
        func wake() { wakes += 1 }
    }

    /// Reads a subscriber the way the server does, `size` bytes at a time, until it waits or ends.
    func drain(_ subscriber: EventSubscriber, size: Int = 4096) -> (text: String, ended: Bool) {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: size)
        while true {
            let result = buffer.withUnsafeMutableBytes { subscriber.read(into: $0) }
            switch result {
            case .data(let n): out += buffer[..<n]
            case .wait: return (String(decoding: out, as: UTF8.self), false)
            case .end: return (String(decoding: out, as: UTF8.self), true)
            }
        }
    }

    func subscriber(_ log: EventLog, after id: Int? = nil) -> EventSubscriber {
        let subscriber = EventStreams(retryMilliseconds: 3000).subscribe(log, lastEventID: id)
        subscriber.attach(NoWaker())
        return subscriber
    }

    @Test("ids increase from 1; a late reader gets everything; Last-Event-ID resumes after it")
    func replay() {
        let log = EventLog()
        log.append("progress", "{\"index\":0}")
        log.append("done", "{\"index\":0}")
        let late = drain(subscriber(log))
        #expect(late.text == "retry: 3000\n\nid: 1\nevent: progress\ndata: {\"index\":0}\n\nid: 2\nevent: done\ndata: {\"index\":0}\n\n")
        #expect(!late.ended)
        let resumed = drain(subscriber(log, after: 1))
        #expect(resumed.text == "retry: 3000\n\nid: 2\nevent: done\ndata: {\"index\":0}\n\n")
        #expect(drain(subscriber(log, after: 99)).text == "retry: 3000\n\n")
    }

    @Test("multi-line data becomes one data line each")
    func multiline() {
        let log = EventLog()
        log.append("x", "a\nb")
        #expect(drain(subscriber(log)).text.hasSuffix("id: 1\nevent: x\ndata: a\ndata: b\n\n"))
    }

    @Test("an event's JSON strings read back as written, with and without characters to escape")
    func quoting() throws {
        let texts = ["", "plain", "data:image/jpeg;base64,/9j/2wBD+AA==", "https://bücher.example/🖼.jpg?a=1&b=2",
                     "quote \" backslash \\ slash /", "lines\nand\r\ttabs", "control \u{01}\u{1F} del \u{7F}"]
        for text in texts {
            let quoted = JSONText.quote(text)
            let back = try JSONSerialization.jsonObject(with: Data("[\(quoted)]".utf8)) as? [String]
            #expect(back == [text], "\(quoted)")
        }
        #expect(JSONText.quote("a/b") == "\"a/b\"")
        #expect(JSONText.quote("a\u{01}") == "\"a\\u0001\"")
    }

    @Test("readable: each event's name and JSON as appended, in order; within a byte limit, the first ones that fit")
    func readable() {
        let log = EventLog()
        log.append("done", "{\"index\":0}")
        log.append("x", "a\nb")
        log.append("end", "{}")
        let all = log.readable()
        #expect(all.map(\.id) == [1, 2, 3] && all.map(\.name) == ["done", "x", "end"] && all.map(\.json) == ["{\"index\":0}", "a\nb", "{}"])
        let first = EventLog.frame(id: 1, "done", "{\"index\":0}").count
        #expect(log.readable(upTo: first).map(\.id) == [1])
        #expect(log.readable(upTo: first - 1).isEmpty)
        #expect(log.readable(upTo: first + EventLog.frame(id: 2, "x", "a\nb").count).map(\.id) == [1, 2])
    }

    @Test("framing keeps empty lines, a trailing newline and non-ASCII text as they are")
    func framingEdges() {
        #expect(String(decoding: EventLog.frame(id: 7, "x", ""), as: UTF8.self) == "id: 7\nevent: x\ndata: \n\n")
        #expect(String(decoding: EventLog.frame(id: 1, "x", "a\n\nb\n"), as: UTF8.self)
                == "id: 1\nevent: x\ndata: a\ndata: \ndata: b\ndata: \n\n")
        #expect(String(decoding: EventLog.frame(id: 2, "done", "{\"u\":\"bücher 🖼\"}"), as: UTF8.self)
                == "id: 2\nevent: done\ndata: {\"u\":\"bücher 🖼\"}\n\n")
    }

    @Test("a reader whose buffer is smaller than an event gets it in parts, across the compaction at the end")
    func partsAcrossCompaction() {
        let log = EventLog()
        let reader = subscriber(log)
        let long = String(repeating: "y", count: 500)
        log.append("done", "{\"v\":\"\(long)\"}")
        var buffer = [UInt8](repeating: 0, count: 100)
        var first: [UInt8] = []
        for _ in 0..<3 {  // part of the preamble and the event, then the log finishes mid-event
            if case .data(let n) = buffer.withUnsafeMutableBytes({ reader.read(into: $0) }) { first += buffer[..<n] }
        }
        log.append("end", "{}")
        _ = log.finish()  // compacts every event into one buffer
        let rest = drain(reader, size: 100)
        let whole = String(decoding: first, as: UTF8.self) + rest.text
        #expect(whole == "retry: 3000\n\nid: 1\nevent: done\ndata: {\"v\":\"\(long)\"}\n\nid: 2\nevent: end\ndata: {}\n\n")
        #expect(rest.ended)  // the only subscriber has read everything
        #expect(log.retainedBytes >= whole.utf8.count - 13)
    }

    @Test("after the end, streams close once every subscriber has read everything, not before")
    func closeAfterDrain() {
        let log = EventLog()
        let fast = subscriber(log)
        let slow = subscriber(log)
        log.append("end", "{}")
        _ = log.finish()
        let first = drain(fast)
        #expect(first.text.hasSuffix("event: end\ndata: {}\n\n"))
        #expect(!first.ended)  // slow has not read the end yet
        #expect(drain(slow).ended)  // the last one to drain may close at once
        #expect(drain(fast).ended)  // and then the others
    }

    @Test("a subscriber that leaves does not hold the others open")
    func leaverReleases() {
        let log = EventLog()
        let stays = subscriber(log)
        let leaves = subscriber(log)
        log.append("end", "{}")
        _ = log.finish()
        #expect(!drain(stays).ended)
        leaves.detach()
        #expect(drain(stays).ended)
    }
}
