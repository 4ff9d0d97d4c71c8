import Support
internal import CMicroHTTPD
import Foundation
import Glibc
import Synchronization

/// Watches the sockets of suspended connections, which libmicrohttpd does not poll: for the
/// client hanging up (MHD would only notice at its next write), and, on request, for room
/// to write (a stream that writes to its socket itself, see `RequestContext+Stream`, waits
/// for that while the socket is full). One epoll set, one thread; each watch is one shot and
/// re-armed after it fires. The one watcher of a socket is its request's context.
final class SocketWatcher: Sendable {
    private let epoll: Int32
    private let wakeFD: Int32
    /// The watched sockets' contexts, by socket number: the kernel hands out the lowest free
    /// number, so the array stays near the count of open files, and an entry is found without
    /// hashing. 10,000 open event streams are 10,000 entries, 16 bytes each.
    private struct Watched {
        /// A token is the socket number with this in the high half, so that an event for a
        /// socket that was closed and its number reused is not taken for the new one's.
        var generation: UInt32 = 0
        var slots: [(token: UInt64, context: RequestContext)?] = []

        mutating func add(fd: Int32, _ context: RequestContext) -> UInt64 {
            generation = generation == .max ? 1 : generation + 1
            let token = UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
            let index = Int(fd)
            if index >= slots.count {
                slots.append(contentsOf: repeatElement(nil, count: max(index + 1, 2 * slots.count) - slots.count))
            }
            slots[index] = (token, context)
            return token
        }

        /// The socket and context of `token`, while it is still the socket's watch.
        func find(_ token: UInt64) -> (fd: Int32, context: RequestContext)? {
            let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: token))
            guard fd >= 0, Int(fd) < slots.count, let slot = slots[Int(fd)], slot.token == token else { return nil }
            return (fd, slot.context)
        }

        mutating func remove(_ token: UInt64) -> (fd: Int32, context: RequestContext)? {
            guard let found = find(token) else { return nil }
            slots[Int(found.fd)] = nil
            return found
        }
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
    func watch(fd: Int32, observer: RequestContext) -> UInt64? {
        guard fd >= 0 else { return nil }
        return watched.withLock { state -> UInt64? in
            let token = state.add(fd: fd, observer)
            guard thumbd_watch_add(epoll, fd, token) == 0 else {
                _ = state.remove(token)
                return nil
            }
            return token
        }
    }

    /// Also reports, once, when the socket has room to write (`socketWritable`).
    func awaitWritable(_ token: UInt64) {
        watched.withLock { state in
            guard let found = state.find(token) else { return }
            _ = thumbd_watch_rearm(epoll, found.fd, token, 1)
        }
    }

    func unwatch(_ token: UInt64) {
        watched.withLock { state in
            guard let found = state.remove(token) else { return }
            _ = thumbd_watch_remove(epoll, found.fd)
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
                let observer = watched.withLock { state -> RequestContext? in
                    if hangup != 0 {
                        guard let found = state.remove(token) else { return nil }
                        _ = thumbd_watch_remove(epoll, found.fd)
                        return found.context
                    }
                    // Room to write: keep watching for a hang-up (the shot is spent).
                    guard let found = state.find(token) else { return nil }
                    _ = thumbd_watch_rearm(epoll, found.fd, token, 0)
                    return found.context
                }
                // Outside our lock: observers take their own.
                if hangup != 0 { observer?.clientGone() } else { observer?.socketWritable() }
            }
        }
    }
}
