/// A parser for `text/event-stream` as the HTML standard specifies it (§9.2.6), the way
/// EventSource reads a stream: lines end in CRLF, LF or CR; a leading BOM is skipped;
/// lines starting with ":" are comments; "field: value" drops one space after the colon;
/// `data` lines join with "\n"; a blank line dispatches the event (none if data is empty);
/// `id` sets the last event id (ignored if it contains NUL) and persists; `retry` takes
/// digits only; the event type defaults to "message".
public struct EventStreamParser: Sendable {
    public struct Event: Equatable, Sendable {
        public var type: String
        public var data: String
        public var lastEventID: String

        public init(type: String, data: String, lastEventID: String) {
            self.type = type
            self.data = data
            self.lastEventID = lastEventID
        }
    }

    public private(set) var events: [Event] = []
    public private(set) var comments: [String] = []
    public private(set) var retry: Int?
    public private(set) var lastEventID = ""

    private var pending: [UInt8] = []
    private var sawFirstByte = false
    private var lastWasCR = false
    private var eventType = ""
    private var data = ""
    private var dataSeen = false

    public init() {}

    /// Takes the events parsed so far (a streaming reader's way to consume them).
    public mutating func takeEvents() -> [Event] {
        defer { events.removeAll() }
        return events
    }

    public mutating func feed(_ bytes: some Sequence<UInt8>) {
        for byte in bytes {
            if !sawFirstByte {
                sawFirstByte = true
                pending.append(byte)
                continue
            }
            if lastWasCR {
                lastWasCR = false
                if byte == 10 { continue }  // the LF of a CRLF
            }
            switch byte {
            case 13:
                lastWasCR = true
                line()
            case 10:
                line()
            default:
                pending.append(byte)
            }
        }
    }

    private mutating func line() {
        var bytes = pending
        pending = []
        if events.isEmpty && comments.isEmpty && retry == nil && bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            bytes.removeFirst(3)
        }
        let text = String(decoding: bytes, as: UTF8.self)
        if text.isEmpty {
            dispatch()
            return
        }
        if text.hasPrefix(":") {
            comments.append(String(text.dropFirst()))
            return
        }
        let field: Substring
        var value: Substring
        if let colon = text.firstIndex(of: ":") {
            field = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
        } else {
            field = text[...]
            value = ""
        }
        switch field {
        case "event": eventType = String(value)
        case "data":
            data += value + "\n"
            dataSeen = true
        case "id": if !value.contains("\0") { lastEventID = String(value) }
        case "retry": if !value.isEmpty, value.allSatisfy(\.isASCIIDigit) { retry = Int(value) }
        default: break
        }
    }

    private mutating func dispatch() {
        defer {
            data = ""
            dataSeen = false
            eventType = ""
        }
        guard dataSeen else { return }
        if data.hasSuffix("\n") { data.removeLast() }
        events.append(Event(type: eventType.isEmpty ? "message" : eventType, data: data, lastEventID: lastEventID))
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
