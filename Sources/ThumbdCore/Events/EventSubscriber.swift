import HTTPServer
import Synchronization


/// One `text/event-stream` response reading an `EventLog`: `retry:` first, then every
/// event from its cursor, a `: keepalive` comment when asked, and the end of the body once
/// the log is finished, read, and its streams may close (`EventLog.mayClose`). Events
/// larger than the server's buffer are sent in parts.
final class EventSubscriber: ResponseStream, @unchecked Sendable {  // mutable state only under `state`
    /// What a subscriber keeps while its stream is open, 10,000 streams at a time: offsets
    /// into bytes shared by every subscriber (the `retry:` line, the farewell), not copies,
    /// each as wide as what it counts, in an order that leaves no padding (Swift lays fields
    /// out as written).
    private struct State {
        var cursor: Int
        var offset: Int32 = 0  // bytes of the event at `cursor` already sent
        var preambleSent: UInt16 = 0  // bytes of `preamble` already sent (a `retry:` line)
        /// Shutdown: how much of the `shutdown` event has been sent (`lastWords`).
        var farewellSent: UInt16 = 0
        var waker: (any StreamWaker)?
        var keepalivePending = false
        var detached = false
    }

    private let log: EventLog
    private let state: Mutex<State>
    /// What every stream shares (the `retry:` line, the writer), and who counts it.
    private let streams: EventStreams

    /// Made by `EventStreams.subscribe`, which counts it.
    init(log: EventLog, lastEventID: Int?, streams: EventStreams) {
        self.log = log
        self.streams = streams
        self.state = Mutex(State(cursor: log.index(after: lastEventID)))
    }

    func attach(_ waker: any StreamWaker) {
        state.withLock { $0.waker = waker }
        log.subscribe(self)
    }

    func detach() {
        let first = state.withLock { state -> Bool in
            defer { state.detached = true; state.waker = nil }
            return !state.detached
        }
        guard first else { return }
        log.unsubscribe(self)
        streams.ended(on: log)
    }

    /// Something new in the log (or a keepalive is due): have the connection send it. From
    /// any thread, holding no lock of a log's or a stream's: the connection's event loop
    /// reads this stream and writes its socket at its next turn.
    func wake() {
        state.withLock { $0.waker }?.wake()
    }

    /// Shutdown: the stream says so before it ends, in an event without an id (it is not
    /// in the batch's log, so a reconnect's `Last-Event-ID` resumes where the log left off).
    static let farewell = Array(("event: shutdown\ndata: {\"message\":\"thumbd is stopping: this stream will reconnect and "
        + "resume where it left off\"}\n\n").utf8)

    /// The server ends the stream (shutdown) once it has nothing else to send: the
    /// `shutdown` event goes first.
    func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        state.withLock { state in
            let rest = Self.farewell[Int(state.farewellSent)...]
            let count = min(rest.count, buffer.count)
            guard count > 0 else { return 0 }
            rest.prefix(count).withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count) }
            state.farewellSent += UInt16(count)
            return count
        }
    }

    /// The next read sends a `: keepalive` comment if it has no event to send.
    func requestKeepalive() {
        state.withLock { $0.keepalivePending = true }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamRead {
        state.withLock { state -> StreamRead in
            var written = 0
            func put(_ bytes: ArraySlice<UInt8>) -> Int {
                let n = min(bytes.count, buffer.count - written)
                guard n > 0 else { return 0 }
                bytes.prefix(n).withUnsafeBytes { source in
                    (buffer.baseAddress! + written).copyMemory(from: source.baseAddress!, byteCount: n)
                }
                written += n
                return n
            }
            let preamble = streams.preamble
            if state.preambleSent < preamble.count {
                state.preambleSent += UInt16(put(preamble[Int(state.preambleSent)...]))
                if state.preambleSent < preamble.count { return .data(written) }
            }
            var finished = false
            while written < buffer.count {
                let (events, done) = log.events(from: state.cursor)
                finished = done
                if events.isEmpty { break }
                for event in events {
                    let n = put(event.text[(event.text.startIndex + Int(state.offset))...])  // a slice of a shared buffer once compacted
                    state.offset += Int32(n)
                    guard state.offset == event.text.count else { return .data(written) }  // buffer full mid-event
                    state.offset = 0
                    state.cursor += 1
                }
            }
            if written > 0 {
                state.keepalivePending = false
                return .data(written)
            }
            // Asked again after the last bytes went out: everything has been handed over.
            if finished, log.mayClose(after: self) { return .end }
            if state.keepalivePending {
                state.keepalivePending = false
                return .data(put(Array(": keepalive\n\n".utf8)[...]))
            }
            return .wait
        }
    }
}
