import HTTPServer
import Synchronization

/// One `text/event-stream` response reading an `EventLog`: `retry:` first, then every
/// event from its cursor, a `: keepalive` comment when asked, and the end of the body once
/// the log is finished, read, and its streams may close (`EventLog.mayClose`). Events
/// larger than the server's buffer are sent in parts.
final class EventSubscriber: ResponseStream, @unchecked Sendable {  // mutable state only under `state`
    private struct State {
        var preamble: [UInt8]
        var cursor: Int
        var offset = 0  // bytes of the event at `cursor` already sent
        var keepalivePending = false
        /// Shutdown: what is left to send of the `shutdown` event (`lastWords`).
        var farewell = EventSubscriber.farewell[...]
        var waker: (any StreamWaker)?
        var detached = false
    }

    private let log: EventLog
    private let state: Mutex<State>
    /// Whether the subscriber waits in `Delivery`'s queue: it is queued at most once.
    private let queued = Atomic(false)
    private let onDetach: @Sendable (ObjectIdentifier) -> Void
    /// Its writer: the lane that wakes it (nil: whoever calls `wake`, in tests without a server).
    private let delivery: Delivery?

    init(log: EventLog, lastEventID: Int?, retryMilliseconds: Int, delivery: Delivery? = nil,
         onDetach: @escaping @Sendable (ObjectIdentifier) -> Void) {
        self.log = log
        self.delivery = delivery
        self.onDetach = onDetach
        self.state = Mutex(State(preamble: Array("retry: \(retryMilliseconds)\n\n".utf8),
                                 cursor: log.index(after: lastEventID)))
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
        onDetach(ObjectIdentifier(self))
    }

    /// Something new in the log (or a keepalive is due): have the connection send it. Called
    /// by its delivery lane only (`Delivery`): while the connection is suspended the waker
    /// writes the socket on this thread.
    func wake() {
        delivery?.assertIsWriter()
        state.withLock { $0.waker }?.wake()
    }

    /// The socket has room again for the rest of a chunk: its writer finishes it.
    func socketHasRoom(_ waker: any StreamWaker) {
        if let delivery { delivery.wake([self]) } else { waker.wake() }
    }

    /// Shutdown: the stream says so before it ends, in an event without an id (it is not
    /// in the batch's log, so a reconnect's `Last-Event-ID` resumes where the log left off).
    static let farewell = Array(("event: shutdown\ndata: {\"message\":\"thumbd is stopping: this stream will reconnect and "
        + "resume where it left off\"}\n\n").utf8)

    /// The server ends the stream (shutdown) once it has nothing else to send: the
    /// `shutdown` event goes first.
    func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        state.withLock { state in
            let count = min(state.farewell.count, buffer.count)
            guard count > 0 else { return 0 }
            state.farewell.prefix(count).withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count) }
            state.farewell = state.farewell.dropFirst(count)
            return count
        }
    }

    /// The next read sends a `: keepalive` comment if it has no event to send.
    func requestKeepalive() {
        state.withLock { $0.keepalivePending = true }
    }

    /// Marks it queued; false when it already was.
    func markQueued() -> Bool {
        queued.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    func unmarkQueued() {
        queued.store(false, ordering: .releasing)
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
            if !state.preamble.isEmpty {
                let n = put(state.preamble[...])
                state.preamble.removeFirst(n)
                if !state.preamble.isEmpty { return .data(written) }
            }
            var finished = false
            while written < buffer.count {
                let (events, done) = log.events(from: state.cursor)
                finished = done
                if events.isEmpty { break }
                for event in events {
                    let n = put(event.text[(event.text.startIndex + state.offset)...])  // a slice of a shared buffer once compacted
                    state.offset += n
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
