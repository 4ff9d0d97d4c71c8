internal import CMicroHTTPD
import Foundation
import Glibc
import Synchronization

/// Notices clients that hang up while their connection is suspended. libmicrohttpd does not
/// poll suspended connections, so it would only notice at the next write; we watch their
/// sockets with an epoll set of our own (`EPOLLRDHUP`, one shot) on one thread.
/// Something suspended that wants to know when its client hangs up.
protocol HangupObserver: AnyObject, Sendable {
    func clientGone()
}

final class DisconnectWatcher: Sendable {
    private let epoll: Int32
    private let wakeFD: Int32
    private struct Watched {
        var next: UInt64 = 0
        var entries: [UInt64: (fd: Int32, observer: any HangupObserver)] = [:]
    }
    private let watched = Mutex(Watched())
    private let stopped = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    init() {
        epoll = thumbd_watch_create()
        wakeFD = thumbd_watch_eventfd()
        precondition(epoll >= 0 && wakeFD >= 0, "epoll/eventfd: \(String(cString: strerror(errno)))")
        precondition(thumbd_watch_add(epoll, wakeFD, 0, 0) == 0, "epoll_ctl: \(String(cString: strerror(errno)))")
        let thread = Thread { [self] in
            ThreadName.set("thumbd-hangups")
            run()
            finished.signal()
        }
        thread.name = "thumbd-hangups"
        thread.start()
    }

    /// Starts watching `fd`; returns the token to stop watching it.
    func watch(fd: Int32, observer: any HangupObserver) -> UInt64? {
        watched.withLock { state -> UInt64? in
            state.next += 1
            let token = state.next
            guard thumbd_watch_add(epoll, fd, token, 1) == 0 else { return nil }
            state.entries[token] = (fd, observer)
            return token
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
        while true {
            let count = thumbd_watch_wait(epoll, &tokens, Int32(tokens.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            for token in tokens.prefix(Int(count)) {
                if token == 0 {
                    if stopped.withLock({ $0 }) { return }
                    continue
                }
                let observer = watched.withLock { state -> (any HangupObserver)? in
                    guard let entry = state.entries.removeValue(forKey: token) else { return nil }
                    _ = thumbd_watch_remove(epoll, entry.fd)
                    return entry.observer
                }
                observer?.clientGone()  // outside our lock: it takes its own
            }
        }
    }
}
