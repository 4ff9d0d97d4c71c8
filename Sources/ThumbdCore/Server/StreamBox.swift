internal import CMicroHTTPD
import Synchronization

/// Connects a `ResponseStream` to one MHD connection. MHD calls `read` from its content
/// reader; with nothing to send the connection is suspended right there (returning 0
/// without suspending would make MHD spin), and `wake` resumes it. Both sides take the
/// box's lock, so a wake can never fall between "nothing to send" and "suspended".
final class StreamBox: StreamWaker, HangupObserver, @unchecked Sendable {  // mutable state only under `lock`
    private let stream: any ResponseStream
    private let connection: ConnectionPointer
    private unowned let core: ServerCore
    private let lock = Mutex(Flags())

    private struct Flags {
        var suspended = false
        var closed = false
        var gone = false
        var watchToken: UInt64?
    }

    init(stream: any ResponseStream, connection: OpaquePointer, core: ServerCore) {
        self.stream = stream
        self.connection = ConnectionPointer(raw: connection)
        self.core = core
        stream.attach(self)
    }

    /// Content reader: bytes written, 0 after suspending, or -1 at the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        lock.withLock { flags -> Int in
            if flags.gone { return -1 }
            switch stream.read(into: buffer) {
            case .data(let count): return count
            case .end: return -1
            case .wait:
                // During shutdown nothing may stay suspended: end the stream instead.
                guard !flags.closed, core.beginSuspension() else { return -1 }
                MHD_suspend_connection(connection.raw)
                flags.suspended = true
                // A suspended connection does not notice its client leaving; we watch for it.
                let fd = thumbd_mhd_connection_fd(connection.raw)
                if fd >= 0 { flags.watchToken = core.watcher.watch(fd: fd, observer: self) }
                return 0
            }
        }
    }

    func wake() {
        lock.withLock { resume(&$0) }
    }

    /// The client hung up while the stream was suspended: end it now rather than at the
    /// next keepalive, so its resources go at once.
    func clientGone() {
        lock.withLock { flags in
            flags.watchToken = nil  // the watcher dropped it already
            flags.gone = true
            resume(&flags)
        }
    }

    private func resume(_ flags: inout Flags) {
        guard flags.suspended else { return }
        flags.suspended = false
        if let token = flags.watchToken {
            core.watcher.unwatch(token)  // before resuming: MHD may then close the socket
            flags.watchToken = nil
        }
        MHD_resume_connection(connection.raw)
        core.didResume()
    }

    /// MHD is done with the response (sent, or the client left).
    func close() {
        lock.withLock { flags in
            flags.closed = true
            if let token = flags.watchToken { core.watcher.unwatch(token) }
            flags.watchToken = nil
        }
        stream.detach()
    }
}

let readStream: MHD_ContentReaderCallback = { cls, _, buffer, max in
    guard let cls, let buffer else { return -1 }
    let box = Unmanaged<StreamBox>.fromOpaque(cls).takeUnretainedValue()
    return box.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
}

let freeStream: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    let box = Unmanaged<StreamBox>.fromOpaque(cls).takeRetainedValue()
    box.close()
}
