internal import CMicroHTTPD
import Synchronization

/// Connects a `ResponseStream` to one MHD connection. MHD calls `read` from its content
/// reader; with nothing to send the connection is suspended right there (returning 0
/// without suspending would make MHD spin), and `wake` resumes it. Both sides take the
/// box's lock, so a wake can never fall between "nothing to send" and "suspended".
final class StreamBox: StreamWaker, @unchecked Sendable {  // mutable state only under `lock`
    private let stream: any ResponseStream
    private let connection: ConnectionPointer
    private unowned let core: ServerCore
    private let lock = Mutex(Flags())

    private struct Flags {
        var suspended = false
        var closed = false
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
            switch stream.read(into: buffer) {
            case .data(let count): return count
            case .end: return -1
            case .wait:
                // During shutdown nothing may stay suspended: end the stream instead.
                guard !flags.closed, core.beginSuspension() else { return -1 }
                MHD_suspend_connection(connection.raw)
                flags.suspended = true
                return 0
            }
        }
    }

    func wake() {
        lock.withLock { flags in
            guard flags.suspended else { return }
            flags.suspended = false
            MHD_resume_connection(connection.raw)
            core.didResume()
        }
    }

    /// MHD is done with the response (sent, or the client left).
    func close() {
        lock.withLock { $0.closed = true }
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
