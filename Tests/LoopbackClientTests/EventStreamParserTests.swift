import Testing
import LoopbackClient
import EventStream

@Suite("The test suite's SSE parser follows the spec")
struct EventStreamParserTests {
    func parse(_ text: String, split: Int? = nil) -> EventStreamParser {
        var parser = EventStreamParser()
        let bytes = Array(text.utf8)
        if let split {  // the same stream in small pieces must parse the same
            var index = 0
            while index < bytes.count {
                parser.feed(bytes[index..<min(index + split, bytes.count)])
                index += split
            }
        } else {
            parser.feed(bytes)
        }
        return parser
    }

    @Test("fields, comments, multi-line data, default type, persistent id", arguments: [nil, 1, 3])
    func fields(split: Int?) {
        let parser = parse("\u{FEFF}retry: 1500\n: hello\n\nid: 7\nevent: done\ndata: {\"a\":1}\n\ndata:x\ndata: y\n\n", split: split)
        #expect(parser.retry == 1500)
        #expect(parser.comments == [" hello"])
        #expect(parser.events == [
            .init(type: "done", data: "{\"a\":1}", lastEventID: "7"),
            .init(type: "message", data: "x\ny", lastEventID: "7"),
        ])
    }

    @Test("CRLF, LF and CR all end lines", arguments: ["\r\n", "\n", "\r"])
    func lineEndings(_ end: String) {
        let parser = parse("id: 1" + end + "event: e" + end + "data: d" + end + end, split: 2)
        #expect(parser.events == [.init(type: "e", data: "d", lastEventID: "1")])
    }

    @Test("no data means no event; a bad retry is ignored; a field without colon is a name")
    func edges() {
        let parser = parse("event: lonely\n\nretry: 12a\ndata\n\n")
        #expect(parser.retry == nil)
        #expect(parser.events == [.init(type: "message", data: "", lastEventID: "")])
    }
}
