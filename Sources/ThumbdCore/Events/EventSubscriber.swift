import Synchronization

/// One `text/event-stream` response reading an `EventLog`: `retry:` first, then every
/// event from its cursor, a `: keepalive` comment when asked, and the end of the body once
/// the log is finished and read. Events larger than the server's buffer are sent in parts.
final class EventSubscriber: ResponseStream, @unchecked Sendable {  // mutable state only under `state`
    private struct State {
        var preamble: [UInt8]
        var cursor: Int
        var offset = 0  // bytes of the event at `cursor` already sent
        var keepalivePending = false
        var waker: (any StreamWaker)?
        var detached = false
    }

    private let log: EventLog
    private let state: Mutex<State>
    private let onDetach: @Sendable () -> Void

    init(log: EventLog, lastEventID: Int?, retryMilliseconds: Int, onDetach: @escaping @Sendable () -> Void) {
        self.log = log
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
        onDetach()
    }

    /// Something new in the log (or a keepalive is due): resume the connection.
    func wake(keepalive: Bool = false) {
        let waker = state.withLock { state -> (any StreamWaker)? in
            if keepalive { state.keepalivePending = true }
            return state.waker
        }
        waker?.wake()
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
                    let n = put(event.text[state.offset...])
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
            if finished { return .end }
            if state.keepalivePending {
                state.keepalivePending = false
                return .data(put(Array(": keepalive\n\n".utf8)[...]))
            }
            return .wait
        }
    }
}
