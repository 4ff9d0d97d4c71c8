import Dispatch
import Synchronization

/// Every event of one batch, in order, each already rendered as SSE text. Subscribers read
/// from it at their own position (a cursor), so a slow reader costs nothing but its cursor:
/// there is no queue per subscriber to grow. A late subscriber starts from the beginning,
/// or after its `Last-Event-ID`. Ids are 1, 2, 3… within the log; a log restored after a
/// restart keeps its recorded events' ids and goes on from its journal's reservation, so
/// ids only ever increase.
///
/// Closing comes after delivering. Once the log is finished, its streams end only when every
/// subscriber has been handed the last event (or `closeGrace` has passed, for a reader that
/// does not read): ending a stream costs a write of its own (the chunked body's end), and
/// with a thousand subscribers the first streams' ends would otherwise sit between the
/// last event and the subscribers still waiting for it.
package final class EventLog: Sendable {
    /// How long finished streams wait for the slowest subscriber before they close anyway.
    static let closeGrace = DispatchTimeInterval.seconds(1)
    /// The logs' timers and deferred wakes: a serial queue of their own, which a global
    /// queue busy with other work cannot make late (as the resize lane's watchdogs have).
    private static let timers = DispatchQueue(label: "thumbd.events.timers")

    struct Event {
        let id: Int
        /// The event's bytes: its own array while the log grows, a slice of one shared
        /// buffer once the log is finished and compacted.
        let text: ArraySlice<UInt8>
    }

    private struct State {
        var events: [Event] = []
        var nextID = 1
        var finished = false
        var subscribers: [ObjectIdentifier: EventSubscriber] = [:]
        /// After the end: subscribers not yet handed every event. Streams close once it is empty.
        var undrained: Set<ObjectIdentifier> = []
        var closable = false
        /// Bytes of event text held (what a kept batch costs, with its items).
        var textBytes = 0
        /// Events with this id or above wait for their id to be reserved in the journal
        /// before any subscriber reads them (see `release(below:)`); no journal: none wait.
        var visibleBelow = Int.max
    }

    private let state = Mutex(State())

    /// Told of every event appended (id, name, JSON), under the log's lock so in order: the
    /// batch's journal records them.
    private let record: (@Sendable (Int, String, String) -> Void)?

    /// `visibleBelow`: the first id the journal has not yet reserved (nil: nothing waits).
    init(record: (@Sendable (Int, String, String) -> Void)? = nil, visibleBelow: Int? = nil) {
        self.record = record
        if let visibleBelow { state.withLock { $0.visibleBelow = visibleBelow } }
    }

    /// The journal has committed the ids below `id`: the events it covers may be read. A
    /// client must never see an id that a restart could give again, and waiting for the
    /// commit on the appending thread would block it under this lock and the batch's (a slow
    /// disk would stall the transfer loop), so the events wait here instead, and this wakes
    /// their readers once the commit is in.
    func release(below id: Int) {
        let subscribers = state.withLock { state -> [EventSubscriber] in
            guard id > state.visibleBelow else { return [] }
            let wasHeld = state.events.last.map { $0.id >= state.visibleBelow } ?? false
            state.visibleBelow = id
            return wasHeld ? Array(state.subscribers.values) : []
        }
        wakeLater(subscribers)
    }


    /// Puts back an event recorded before a restart, with its id (ids must increase).
    func restore(id: Int, _ name: String, _ json: String) {
        state.withLock { state in
            precondition(id >= state.nextID, "restored event \(id) after \(state.nextID - 1)")
            state.nextID = id
            Self.add(name, json, to: &state)
        }
    }

    /// The next event gets at least `id` (a restored log goes on after every id used before).
    func skip(to id: Int) {
        state.withLock { $0.nextID = max($0.nextID, id) }
    }

    private static func add(_ name: String, _ json: String, to state: inout State) {
        let id = state.nextID
        state.nextID += 1
        state.events.append(Event(id: id, text: frame(id: id, name, json)[...]))
        state.textBytes += state.events[state.events.count - 1].text.count
    }

    /// One event as SSE text: a `data:` line per line of `json`. Framed on its UTF-8 bytes:
    /// splitting the String would walk a tile's inline image as grapheme clusters, which was
    /// most of a warm batch's POST (120 events of 3 KB each).
    static func frame(id: Int, _ name: String, _ json: String) -> [UInt8] {
        let bytes = Array(json.utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count + name.utf8.count + 32)
        text += "id: \(id)\nevent: \(name)\n".utf8
        var start = 0
        for end in bytes.indices where bytes[end] == UInt8(ascii: "\n") {
            text += "data: ".utf8
            text += bytes[start...end]
            start = end + 1
        }
        text += "data: ".utf8
        text += bytes[start...]
        text += [UInt8(ascii: "\n"), UInt8(ascii: "\n")]
        return text
    }

    /// Every event a subscriber could read now, as its id, name and JSON: what a new batch's
    /// 201 carries, so that a client has the events already there (a warm grid: all of them,
    /// `end` included) without reading them again from the stream.
    /// At most `limit` bytes of event text: the first events that fit (a client reads the
    /// rest from the stream, after the last one given).
    func readable(upTo limit: Int = .max) -> [(id: Int, name: String, json: String)] {
        let events = state.withLock { state in
            var bytes = 0
            return state.events.prefix { event in
                bytes += event.text.count
                return event.id < state.visibleBelow && bytes <= limit
            }
        }
        return events.map { event in
            // The framing undone, on bytes: "id: N", "event: NAME", each "data: …", "", "".
            let lines = event.text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            guard lines.count >= 5 else { return (event.id, "", "") }
            var json: [UInt8] = []
            for (number, line) in lines.dropFirst(2).dropLast(2).enumerated() {
                if number > 0 { json.append(UInt8(ascii: "\n")) }
                json += line.dropFirst("data: ".utf8.count)
            }
            return (event.id, String(decoding: lines[1].dropFirst("event: ".utf8.count), as: UTF8.self),
                    String(decoding: json, as: UTF8.self))
        }
    }

    /// Appends an event and returns the subscribers to wake (wake them after releasing any
    /// lock of your own).
    /// `recorded`: what the journal keeps instead of `json` (the same event without what
    /// need not outlive the process, such as an inline image).
    @discardableResult
    func append(_ name: String, _ json: String, recorded: String? = nil) -> [EventSubscriber] {
        state.withLock { state in
            precondition(!state.finished, "event \(name) after the end of the log")
            let id = state.nextID
            Self.add(name, json, to: &state)
            record?(id, name, recorded ?? json)
            return Array(state.subscribers.values)
        }
    }

    /// No event follows; subscribers end their streams once every one of them has read
    /// everything (see `mayClose`).
    func finish() -> [EventSubscriber] {
        let subscribers = state.withLock { state in
            state.finished = true
            Self.compact(&state.events)
            state.undrained = Set(state.subscribers.keys)
            state.closable = state.undrained.isEmpty
            return Array(state.subscribers.values)
        }
        Self.timers.asyncAfter(deadline: .now() + Self.closeGrace) { [weak self] in
            self?.allowClosing()
        }
        return subscribers
    }

    /// One buffer for every event of a finished log instead of one allocation each (a
    /// 1,000-item batch is 1,000–3,000 events, kept for `batches.retentionSeconds`).
    private static func compact(_ events: inout [Event]) {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(events.reduce(0) { $0 + $1.text.count })
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(events.count)
        for event in events {
            ranges.append(buffer.count..<(buffer.count + event.text.count))
            buffer.append(contentsOf: event.text)
        }
        events = zip(events, ranges).map { Event(id: $0.id, text: buffer[$1]) }
    }

    /// Memory the log holds, roughly: its text and a record per event.
    var retainedBytes: Int { state.withLock { $0.textBytes + $0.events.count * MemoryLayout<Event>.stride } }

    /// Called by a subscriber that has been handed every event of the finished log: may its
    /// stream end now? When it was the last one the others waited for, they are woken to end.
    func mayClose(after subscriber: EventSubscriber) -> Bool {
        let (closable, others) = state.withLock { state -> (Bool, [EventSubscriber]) in
            guard !state.closable else { return (true, []) }
            state.undrained.remove(ObjectIdentifier(subscriber))
            guard state.undrained.isEmpty else { return (false, []) }
            state.closable = true
            return (true, state.subscribers.values.filter { $0 !== subscriber })
        }
        wakeLater(others)
        return closable
    }

    /// The grace has passed (or nobody is left to wait for): every stream may end.
    private func allowClosing() {
        let subscribers = state.withLock { state -> [EventSubscriber] in
            guard state.finished, !state.closable else { return [] }
            state.closable = true
            return Array(state.subscribers.values)
        }
        wakeLater(subscribers)
    }

    /// Wakes from a dispatch queue, not from inside a stream's read: the caller holds its own
    /// stream's locks, and waking takes the others'.
    private func wakeLater(_ subscribers: [EventSubscriber]) {
        guard !subscribers.isEmpty else { return }
        Self.timers.async { for subscriber in subscribers { subscriber.wake() } }
    }

    var count: Int { state.withLock { $0.events.count } }
    var isFinished: Bool { state.withLock { $0.finished } }
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }
    var subscriberList: [EventSubscriber] { state.withLock { Array($0.subscribers.values) } }

    /// The index of the first event after `lastEventID` (0 for everything). Ids increase
    /// but may jump (after a restart), so it is searched for.
    func index(after lastEventID: Int?) -> Int {
        guard let lastEventID else { return 0 }
        return state.withLock { state in
            var low = 0, high = state.events.count
            while low < high {
                let middle = (low + high) / 2
                if state.events[middle].id <= lastEventID { low = middle + 1 } else { high = middle }
            }
            return low
        }
    }

    /// Readable events from `index` on (at most `limit`), and whether the log is finished
    /// with every event readable.
    func events(from index: Int, limit: Int = 64) -> (events: ArraySlice<Event>, finished: Bool) {
        state.withLock { state in
            var end = min(state.events.count, index + limit)
            while end > index, state.events[end - 1].id >= state.visibleBelow { end -= 1 }
            let slice = index < end ? state.events[index..<end] : []
            let allVisible = (state.events.last?.id ?? 0) < state.visibleBelow
            return (slice, state.finished && allVisible)
        }
    }

    func subscribe(_ subscriber: EventSubscriber) {
        state.withLock { $0.subscribers[ObjectIdentifier(subscriber)] = subscriber }
    }

    func unsubscribe(_ subscriber: EventSubscriber) {
        let releases = state.withLock { state -> Bool in
            state.subscribers[ObjectIdentifier(subscriber)] = nil
            let waited = state.undrained.remove(ObjectIdentifier(subscriber)) != nil
            return waited && state.undrained.isEmpty && !state.closable
        }
        if releases { allowClosing() }  // it was the one the others waited for
    }

    func allSubscribers() -> [EventSubscriber] {
        state.withLock { Array($0.subscribers.values) }
    }
}
