import Support
internal import CMicroHTTPD
import Glibc
import Synchronization

/// A streamed answer: MHD calls `read` from its content reader; with nothing to send the
/// connection is suspended right there (returning 0 without suspending would make MHD
/// spin). Both sides take the context's lock, so a wake can never fall between "nothing to
/// send" and "suspended".
///
/// **A wake writes directly, on the connection's event loop.** A stream's producer (any
/// thread) calls `wake`, which hands the context to its loop (`schedule`, at most once until
/// the loop's turn); the loop does not resume the connection just to have MHD call the
/// reader and send a few hundred bytes: while the connection is suspended MHD does not touch
/// its socket, and its output stands between two chunks of the chunked body (MHD asks the
/// reader for more only once everything before has been sent), so the loop frames what the
/// stream has as chunks of its own and sends them straight to the socket without blocking;
/// the connection stays suspended. That is one `send` per subscriber per event instead of a
/// resume, a pass of MHD's loop, a read attempt and two `epoll_ctl` calls: with a thousand
/// subscribers a resume each took three times as long for an event to reach them all. The
/// send runs after the context's lock is released: a producer never waits behind a syscall.
/// Everything that writes or hands the connection back (a wake's turn, room in the socket,
/// the client hanging up, MHD's own reads) runs on the loop, one at a time, so no write can
/// overlap another.
///
/// When the socket takes only part of a chunk, the rest is kept and the connection stays
/// suspended (MHD must not write in the middle of our chunk) until the loop sees room in the
/// socket; once the chunk is complete, MHD takes over again. MHD also takes over when
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
                    if fd >= 0 { state.watchToken = loop.watch(fd: fd, observer: self) ?? 0 }
                }
                return 0
            }
        }
    }

    /// Something new for the stream to send: from any thread; the connection's loop sends it.
    public func wake() { schedule() }

    /// On the loop: write what the stream has while suspended, or hand the connection back
    /// to MHD. The send runs after the lock is released, so a producer never waits behind a
    /// syscall; a wake meanwhile queues the context for the loop's next turn.
    func wakeNow() {
        loop.assertIsWriter()
        var work = state.withLock { state in claim(&state) }
        while true {
            switch work {
            case .nothing:
                return
            case .resume:
                resumeNow()
                return
            case .write(let fd, let pending, let stream):
                let outcome = pending.isEmpty ? writeDirectly(stream, to: fd) : Self.send(pending, to: fd)
                work = state.withLock { state in settle(outcome, &state) }
            }
        }
    }

    private enum Work {
        case nothing
        /// Hand the connection back to MHD (`resumeNow`), the lock released.
        case resume
        /// Send the rest of a chunk (`pending`), else what the stream has, to the socket.
        case write(fd: Int32, pending: [UInt8], stream: any ResponseStream)
    }

    /// Under the lock: what this turn of the loop does for the stream.
    private func claim(_ state: inout State) -> Work {
        guard state.flags[.suspended], let stream = state.stream else { return .nothing }  // MHD has it and will ask the reader
        // Shutting down (nothing may stay suspended), or the client gone: MHD ends it.
        if state.flags[.closed] || state.flags[.gone] || server.isRefusing { return giveBack(&state) }
        let fd = thumbd_mhd_connection_fd(connection.raw)
        let direct = state.flags[.writesDirectly] && state.watchToken != 0
        guard fd >= 0, direct || !state.pending.isEmpty else { return giveBack(&state) }
        defer { state.pending = [] }
        return .write(fd: fd, pending: state.pending, stream: stream)
    }

    /// Hands the connection back to MHD, if it is still ours: resumed once the lock is released.
    private func giveBack(_ state: inout State) -> Work { handBack(&state) ? .resume : .nothing }

    /// What an unlocked write ended with.
    private enum Written {
        /// Everything out, and the stream has nothing more: stay suspended.
        case waiting
        /// A chunk only partly taken by the socket: the rest, sent when there is room.
        case partly([UInt8])
        /// The rest of a chunk is out, or the stream ended: MHD carries on.
        case done
        /// The socket is broken (the client gone): MHD ends the connection.
        case broken
    }

    /// Under the lock again: records what the write did, and says what comes next.
    private func settle(_ written: Written, _ state: inout State) -> Work {
        switch written {
        case .broken:
            state.flags[.gone] = true
            return giveBack(&state)
        case .done:
            return giveBack(&state)
        case .partly(let rest):
            state.pending = rest
            if state.flags[.gone] || state.flags[.closed] || server.isRefusing { return giveBack(&state) }
            if state.watchToken != 0 { loop.awaitWritable(state.watchToken) }
            return .nothing
        case .waiting:
            // Shutdown began while this one was sending (`stopAccepting`, another thread): look again.
            guard server.isRefusing else { return .nothing }
            return claim(&state)
        }
    }

    /// Sends what the stream has, chunk by chunk, to the suspended connection's socket.
    private func writeDirectly(_ stream: any ResponseStream, to fd: Int32) -> Written {
        withUnsafeTemporaryAllocation(byteCount: Self.directChunk, alignment: 1) { frame -> Written in
            let room = UnsafeMutableRawBufferPointer(
                rebasing: frame[Self.chunkHead..<(Self.directChunk - Self.chunkTail)])
            while true {
                switch stream.read(into: room) {
                case .wait:
                    return .waiting  // all sent; stay suspended
                case .end:
                    return .done  // MHD writes the last chunk
                case .data(let count):
                    // "<size in hex>\r\n<data>\r\n", the size line right before the data.
                    let sizeLine = Array((String(count, radix: 16) + "\r\n").utf8)
                    let start = Self.chunkHead - sizeLine.count
                    sizeLine.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: frame[start..<Self.chunkHead]).copyMemory(from: $0) }
                    let end = Self.chunkHead + count + Self.chunkTail
                    frame[end - 2] = 13
                    frame[end - 1] = 10
                    switch Self.send(UnsafeRawBufferPointer(rebasing: frame[start..<end]), to: fd) {
                    case .done: continue
                    case let other: return other  // the rest when the socket has room, or broken
                    }
                }
            }
        }
    }

    private static func send(_ bytes: [UInt8], to fd: Int32) -> Written {
        bytes.withUnsafeBytes { send($0, to: fd) }
    }

    /// Sends `bytes` without blocking: all of it (`done`), or the rest to send when the socket
    /// has room, or the socket is broken (the client gone).
    private static func send(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> Written {
        let sent = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
        if sent == bytes.count { return .done }
        if sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK { return .broken }  // reset or broken
        return .partly(Array(UnsafeRawBufferPointer(rebasing: bytes[max(sent, 0)...])))
    }

    /// The socket has room again (on the loop): the rest of our chunk goes, then MHD carries on.
    func socketWritable() {
        let due = state.withLock { state in state.flags[.suspended] && !state.pending.isEmpty }
        if due { wakeNow() }
    }

    /// The client hung up while a stream was suspended: end the stream now rather than at
    /// the next keepalive, so its resources go at once. False when no stream is open (the
    /// request still waits for its answer).
    func streamGone() -> Bool {
        let (open, resume) = state.withLock { state -> (Bool, Bool) in
            guard state.stream != nil else { return (false, false) }
            state.watchToken = 0  // the loop dropped it already
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
            if state.watchToken != 0 { loop.unwatch(state.watchToken) }
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
