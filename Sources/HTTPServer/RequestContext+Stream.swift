import Support
internal import CMicroHTTPD
import Glibc
import Synchronization

/// A streamed answer: MHD calls `read` from its content reader; with nothing to send the
/// connection is suspended right there (returning 0 without suspending would make MHD
/// spin). Both sides take the context's lock, so a wake can never fall between "nothing to
/// send" and "suspended".
///
/// **A wake writes directly.** It does not resume the connection just to have MHD call the
/// reader and send a few hundred bytes: while the connection is suspended MHD does not touch
/// its socket, and its output stands between two chunks of the chunked body (MHD asks the
/// reader for more only once everything before has been sent), so the waker frames what the
/// stream has as chunks of its own and sends them straight to the socket without blocking;
/// the connection stays suspended. That is one `send` per subscriber per event instead of a
/// resume, an eventfd write, a pass of MHD's loop, a read attempt and two `epoll_ctl` calls:
/// with a thousand subscribers it roughly halved the time for an event to reach them all.
///
/// When the socket takes only part of a chunk, the rest is kept and the connection stays
/// suspended (MHD must not write in the middle of our chunk) until the `SocketWatcher` says
/// there is room; once the chunk is complete, MHD takes over again. MHD also takes over when
/// the stream ends (it writes the last chunk) and when the client has gone. The response
/// must really be chunked for this, so it is only done for HTTP/1.1, where libmicrohttpd
/// always chunks a body of unknown length (`EventStreamFramingTests`); HTTP/1.0 clients get
/// the plain resume path. It also relies on MHD speaking plain TCP (no TLS).
///
/// The socket is watched for a hang-up from the first suspension until MHD frees the
/// response (which it does before it closes the socket).
extension RequestContext {
    /// Room for a chunk's size line before the data, and its CRLF after.
    private static let chunkHead = 8, chunkTail = 2
    /// The most one direct write carries.
    private static let directChunk = 16 * 1024

    /// The answer is `stream`, about to be queued: it reads through this context from now on.
    func beginStream(_ stream: any ResponseStream, writesDirectly: Bool) {
        state.withLock { state in
            state.stream = stream
            state.flags[.writesDirectly] = writesDirectly
        }
        stream.attach(self)
    }

    /// Content reader: bytes written, 0 after suspending, -1 at the end (also when the client
    /// has gone: MHD's last write then fails quietly), or -2 to drop the connection when a
    /// chunk of ours was left half-sent (shutdown, or the client gone mid-chunk).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        state.withLock { state -> Int in
            if !state.pending.isEmpty { return -2 }
            guard !state.flags[.gone], let stream = state.stream else { return -1 }
            switch stream.read(into: buffer) {
            case .data(let count): return count
            case .end: return -1
            case .wait:
                // During shutdown nothing may stay suspended: end the stream instead, after
                // its last words (for an event stream, the event that says it will reconnect).
                guard !state.flags[.closed], server.beginSuspension() else {
                    let count = stream.lastWords(into: buffer)
                    return count > 0 ? count : -1
                }
                MHD_suspend_connection(connection.raw)
                state.flags[.suspended] = true
                // A suspended connection does not notice its client leaving; we watch for it.
                if !state.flags[.watching] {
                    state.flags[.watching] = true
                    let fd = thumbd_mhd_connection_fd(connection.raw)
                    if fd >= 0 { state.watchToken = server.watcher.watch(fd: fd, observer: self) ?? 0 }
                }
                return 0
            }
        }
    }

    /// Something new for the stream to send, or room to finish a chunk: write it while
    /// suspended, or hand the connection back to MHD. Called on the stream's one writer
    /// thread (its owner decides which: `ResponseStream.socketHasRoom`), never on the
    /// watcher's.
    public func wake() {
        let resume = state.withLock { state -> Bool in
            guard state.flags[.suspended], state.stream != nil else { return false }  // MHD has it and will ask the reader
            // Shutting down (nothing may stay suspended), or the client gone: MHD ends it.
            if state.flags[.closed] || state.flags[.gone] || server.isRefusing { return handBack(&state) }
            if !state.pending.isEmpty {
                // The rest of a chunk first; once it is out, MHD carries on.
                let fd = thumbd_mhd_connection_fd(connection.raw)
                let pending = state.pending
                state.pending = []
                switch pending.withUnsafeBytes({ send($0, to: fd, &state) }) {
                case .sent, .broken: return handBack(&state)
                case .pending: return false
                }
            }
            if state.flags[.writesDirectly], state.watchToken != 0 {
                return writeDirectly(&state)
            }
            return handBack(&state)
        }
        if resume { resumeNow() }
    }

    /// Sends what the stream has, chunk by chunk, to the suspended connection's socket.
    /// True when the connection goes back to MHD (`resumeNow`, once the lock is released).
    private func writeDirectly(_ state: inout State) -> Bool {
        let fd = thumbd_mhd_connection_fd(connection.raw)
        guard fd >= 0, let stream = state.stream else { return handBack(&state) }
        return withUnsafeTemporaryAllocation(byteCount: Self.directChunk, alignment: 1) { frame -> Bool in
            let room = UnsafeMutableRawBufferPointer(
                rebasing: frame[Self.chunkHead..<(Self.directChunk - Self.chunkTail)])
            while true {
                switch stream.read(into: room) {
                case .wait:
                    return false  // all sent; stay suspended
                case .end:
                    return handBack(&state)  // MHD writes the last chunk
                case .data(let count):
                    // "<size in hex>\r\n<data>\r\n", the size line right before the data.
                    let sizeLine = Array((String(count, radix: 16) + "\r\n").utf8)
                    let start = Self.chunkHead - sizeLine.count
                    sizeLine.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: frame[start..<Self.chunkHead]).copyMemory(from: $0) }
                    let end = Self.chunkHead + count + Self.chunkTail
                    frame[end - 2] = 13
                    frame[end - 1] = 10
                    let chunk = UnsafeRawBufferPointer(rebasing: frame[start..<end])
                    switch send(chunk, to: fd, &state) {
                    case .sent: continue
                    case .pending: return false  // the rest when the socket has room
                    case .broken: return handBack(&state)
                    }
                }
            }
        }
    }

    private enum Sent { case sent, pending, broken }

    /// Sends `bytes` without blocking: all of it, or the rest kept pending until the socket
    /// has room, or the socket is broken (the client gone: MHD then ends the connection).
    private func send(_ bytes: UnsafeRawBufferPointer, to fd: Int32, _ state: inout State) -> Sent {
        let sent = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
        if sent == bytes.count { return .sent }
        if sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK {
            state.flags[.gone] = true  // reset or broken
            return .broken
        }
        state.pending = Array(UnsafeRawBufferPointer(rebasing: bytes[max(sent, 0)...]))
        if state.watchToken != 0 { server.watcher.awaitWritable(state.watchToken) }
        return .pending
    }

    /// The socket has room again (on the watcher's thread): the stream's writer finishes
    /// our chunk (`wake`), then lets MHD carry on.
    func socketWritable() {
        let stream = state.withLock { state in state.flags[.suspended] && !state.pending.isEmpty ? state.stream : nil }
        stream?.socketHasRoom(self)
    }

    /// The client hung up while a stream was suspended: end the stream now rather than at
    /// the next keepalive, so its resources go at once. False when no stream is open (the
    /// request still waits for its answer).
    func streamGone() -> Bool {
        let (open, resume) = state.withLock { state -> (Bool, Bool) in
            guard state.stream != nil else { return (false, false) }
            state.watchToken = 0  // the watcher dropped it already
            state.flags[.gone] = true
            return (true, handBack(&state))
        }
        if resume { resumeNow() }
        return open
    }

    /// Marks a suspended stream's connection as MHD's again; true when it was suspended, and
    /// the caller resumes it (`resumeNow`) once it has released the lock.
    private func handBack(_ state: inout State) -> Bool {
        guard state.flags[.suspended] else { return false }
        state.flags[.suspended] = false
        return true
    }

    /// MHD is done with the response (sent, or the client left). It has not closed the
    /// socket yet, so this is the last moment to stop watching it.
    func closeStream() {
        let stream = state.withLock { state -> (any ResponseStream)? in
            state.flags[.closed] = true
            if state.watchToken != 0 { server.watcher.unwatch(state.watchToken) }
            state.watchToken = 0
            defer { state.stream = nil }
            return state.stream
        }
        stream?.detach()
    }
}

let readStream: MHD_ContentReaderCallback = { cls, _, buffer, max in
    guard let cls, let buffer else { return -1 }
    let context = Unmanaged<RequestContext>.fromOpaque(cls).takeUnretainedValue()
    return context.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

let freeStream: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    let context = Unmanaged<RequestContext>.fromOpaque(cls).takeRetainedValue()
    context.closeStream()
}
