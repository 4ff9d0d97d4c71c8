import Support
internal import CMicroHTTPD
import Foundation
import Glibc
import Synchronization

/// Something with a suspended connection that wants to know when its client hangs up, and
/// (when it asks) when its socket has room to write again.
protocol SocketObserver: AnyObject, Sendable {
    func clientGone()
    func socketWritable()
}

extension SocketObserver {
    func socketWritable() {}
}

/// Watches the sockets of suspended connections, which libmicrohttpd does not poll: for the
/// client hanging up (MHD would only notice at its next write), and, on request, for room
/// to write (a stream that writes to its socket itself, see `RequestContext+Stream`, waits for that
/// while the socket is full). One epoll set, one thread; each watch is one shot and
/// re-armed after it fires.
final class SocketWatcher: Sendable {
    private let epoll: Int32
    private let wakeFD: Int32
    private struct Watched {
        var next: UInt64 = 0
        var entries: [UInt64: (fd: Int32, observer: any SocketObserver)] = [:]
    }
    private let watched = Mutex(Watched())
    private let stopped = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    init() {
        epoll = thumbd_watch_create()
        wakeFD = thumbd_watch_eventfd()
        precondition(epoll >= 0 && wakeFD >= 0, "epoll/eventfd: \(String(cString: strerror(errno)))")
        precondition(thumbd_watch_add_wakeup(epoll, wakeFD) == 0, "epoll_ctl: \(String(cString: strerror(errno)))")
        let thread = Thread { [self] in
            ThreadName.set("thumbd-sockets")
            run()
            finished.signal()
        }
        thread.name = "thumbd-sockets"
        thread.start()
    }

    /// Starts watching `fd` for a hang-up; returns the token to stop watching it (never 0).
    func watch(fd: Int32, observer: any SocketObserver) -> UInt64? {
        watched.withLock { state -> UInt64? in
            state.next += 1
            let token = state.next
            guard thumbd_watch_add(epoll, fd, token) == 0 else { return nil }
            state.entries[token] = (fd, observer)
            return token
        }
    }

    /// Also reports, once, when the socket has room to write (`socketWritable`).
    func awaitWritable(_ token: UInt64) {
        watched.withLock { state in
            guard let entry = state.entries[token] else { return }
            _ = thumbd_watch_rearm(epoll, entry.fd, token, 1)
        }
    }

    func unwatch(_ token: UInt64) {
        watched.withLock { state in
            guard let entry = state.entries.removeValue(forKey: token) else { return }
            _ = thumbd_watch_remove(epoll, entry.fd)
        }
    }

    func stop() {
        let first = stopped.withLock { value in
            defer { value = true }
            return !value
        }
        guard first else { return }
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
        finished.wait()
        close(epoll)
        close(wakeFD)
    }

    private func run() {
        var tokens = [UInt64](repeating: 0, count: 64)
        var hangups = [Int32](repeating: 0, count: 64)
        while true {
            let count = thumbd_watch_wait(epoll, &tokens, &hangups, Int32(tokens.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            for (token, hangup) in zip(tokens.prefix(Int(count)), hangups) {
                if token == 0 {
                    if stopped.withLock({ $0 }) { return }
                    continue
                }
                let observer = watched.withLock { state -> (any SocketObserver)? in
                    if hangup != 0 {
                        guard let entry = state.entries.removeValue(forKey: token) else { return nil }
                        _ = thumbd_watch_remove(epoll, entry.fd)
                        return entry.observer
                    }
                    // Room to write: keep watching for a hang-up (the shot is spent).
                    guard let entry = state.entries[token] else { return nil }
                    _ = thumbd_watch_rearm(epoll, entry.fd, token, 0)
                    return entry.observer
                }
                // Outside our lock: observers take their own.
                if hangup != 0 { observer?.clientGone() } else { observer?.socketWritable() }
            }
        }
    }
}
