import Support
internal import CMicroHTTPD
import Foundation
import Glibc
import Synchronization

/// One of the server's event loops: a thread of ours that runs one libmicrohttpd daemon
/// (`MHD_run`, no thread of MHD's) and is the one writer of every socket that daemon
/// accepted, as a channel's event loop is in swift-nio. Whatever another thread has for a
/// connection (an answer given later, new events for a stream) it hands to the loop
/// (`schedule`), and the loop writes or resumes at its next turn; nothing else writes a
/// client socket or calls into MHD for it.
///
/// One epoll set holds what the loop waits for: its wake-up eventfd, the daemon's own epoll
/// set (nested: readable when MHD has work), the listening socket, which every loop watches
/// and accepts from (`Listener`: each connection goes to the loop with the fewest, handed over
/// through the same queue as answers, and the daemon has no listening socket of its own),
/// and the sockets of suspended connections, which
/// MHD does not poll: for the client hanging up (MHD would only notice at its next write),
/// and, on request, for room to write (a stream that writes its socket itself while
/// suspended, `RequestContext+Stream`). Each such watch is one shot and re-armed after it
/// fires. Every 250 ms the loop has the connection guard look at its connections'
/// deadlines, on this same thread.
///
/// What libmicrohttpd 0.9.75 asks of a loop that runs it (`MHD_USE_EPOLL` without
/// `MHD_USE_INTERNAL_POLLING_THREAD`): never wait longer than `MHD_get_timeout` says (0 while
/// it has work left over), call `MHD_run` after every wait, and after `MHD_resume_connection`
/// (which wakes the daemon's own epoll set through its inter-thread channel, set up by
/// `MHD_ALLOW_SUSPEND_RESUME`), and after `MHD_add_connection`, which hands the daemon a
/// connection accepted by the loop (`MHD_USE_NO_LISTEN_SOCKET`).
/// Against libmicrohttpd's own thread pool, `scripts/bench release` found the hot hit, the
/// cold thumbnail and the grid as fast, and events reached 1,000 streams as fast once a
/// turn ran everything handed over before MHD ran again (`scripts/BENCHMARKS.md`, 0.14.0).
final class EventLoop: Sendable {
    let index: Int
    let core: ServerCore
    private let epoll: Int32
    private let wakeFD: Int32
    /// The daemon, from `start` on; used on this loop's thread, and by `HTTPServer.stop` once
    /// the thread has exited.
    private let daemon = Slot<DaemonHandle>()
    private let queue = Mutex(Queue())
    private let watched = Mutex(WatchedSockets())
    private let finished = DispatchSemaphore(value: 0)
    /// The loop thread's `pthread_self`, 0 before it runs and after it exited.
    private let owner = Atomic<UInt>(0)
    /// The daemon's open connections (MHD's start notifications less its close ones), and
    /// those accepted for it and not yet given to it: what `Listener` balances.
    private let connections = Atomic<Int>(0)
    private let incoming = Atomic<Int>(0)

    private static let wakeToken: UInt64 = 0, daemonToken: UInt64 = 1, listenerToken: UInt64 = 2
    private static let tick: Duration = .milliseconds(250)
    /// How many connections handed over by other threads a turn runs, at most, before MHD
    /// runs again.
    private static let perTurn = 1024

    /// What other threads hand to the loop.
    private struct Queue {
        var contexts: [RequestContext] = []
        /// Connections another loop accepted for this one.
        var sockets: [AcceptedSocket] = []
        /// The eventfd was written since the loop last took the queue.
        var signalled = false
        var started = false
        var stopping = false
        var exited = false
    }

    init(index: Int, core: ServerCore) {
        self.index = index
        self.core = core
        epoll = thumbd_watch_create()
        wakeFD = thumbd_watch_eventfd()
        precondition(epoll >= 0 && wakeFD >= 0, "epoll/eventfd: \(String(cString: strerror(errno)))")
        precondition(thumbd_watch_add_input(epoll, wakeFD, Self.wakeToken) == 0, "epoll_ctl: \(String(cString: strerror(errno)))")
    }

    /// Takes `daemon`, which the loop runs from `start` on.
    func attach(_ daemon: OpaquePointer) {
        self.daemon.set(DaemonHandle(raw: daemon))
        let mhdEpoll = thumbd_mhd_epoll_fd(daemon)
        precondition(mhdEpoll >= 0 && thumbd_watch_add_input(epoll, mhdEpoll, Self.daemonToken) == 0,
                     "the daemon's epoll set: \(String(cString: strerror(errno)))")
    }

    /// Runs the attached daemon on the loop's own thread, from now on, accepting from
    /// `listener` (which the thread holds until it exits).
    func start(_ listener: Listener) {
        guard let handle = daemon.value else { return }
        queue.withLock { $0.started = true }
        precondition(thumbd_watch_listener(epoll, listener.fd, Self.listenerToken) == 0,
                     "the listening socket: \(String(cString: strerror(errno)))")
        let thread = Thread { [self] in
            ThreadName.set("thumbd-http-\(index)")
            owner.store(UInt(pthread_self()), ordering: .releasing)
            run(handle.raw, listener)
            owner.store(0, ordering: .releasing)
            finished.signal()
        }
        thread.name = "thumbd-http-\(index)"
        thread.start()
    }

    /// Whether the calling thread is this loop's.
    var isCurrent: Bool { owner.load(ordering: .acquiring) == UInt(pthread_self()) }

    /// Traps (in debug builds) unless the calling thread is the loop's, or the loop no longer
    /// runs (`HTTPServer.stop` closing the daemon): where a client socket is written, or MHD
    /// is called for a connection.
    func assertIsWriter() {
        assert(isCurrent || owner.load(ordering: .acquiring) == 0, "a client socket is written by its event loop only")
    }

    /// Has the loop look at `context` at its next turn (`RequestContext.runOnLoop`): its
    /// answer is in, or its stream has something to send. From any thread; the eventfd is
    /// written only when the queue was empty. After the loop stopped, nothing is left to do.
    func schedule(_ context: RequestContext) {
        let signal = queue.withLock { queue -> Bool in
            guard !queue.exited else { return false }
            queue.contexts.append(context)
            defer { queue.signalled = true }
            return !queue.signalled
        }
        if signal { notify() }
    }

    private func notify() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Ends the loop's thread after its current turn and waits for it (if it started). The
    /// daemon is then stopped by the caller, on its own thread (`close`).
    func stop() {
        let running = queue.withLock { queue -> Bool in
            defer { queue.stopping = true }
            return !queue.stopping && queue.started
        }
        guard running else { return }
        notify()
        finished.wait()
    }

    /// After `stop`: stops the daemon (its last callbacks run on this thread), then closes the
    /// loop's descriptors, and the connections handed over that it never took.
    func close() {
        if let daemon = daemon.value { MHD_stop_daemon(daemon.raw) }
        daemon.set(nil)
        let untaken = queue.withLock { queue -> [AcceptedSocket] in
            queue.exited = true
            queue.contexts = []
            defer { queue.sockets = [] }
            return queue.sockets
        }
        for socket in untaken { Glibc.close(socket.fd) }
        Glibc.close(epoll)
        Glibc.close(wakeFD)
    }

    // MARK: Connections (`Listener`)

    /// Open connections, and those on their way.
    var load: Int { connections.load(ordering: .relaxed) + incoming.load(ordering: .relaxed) }

    /// A connection is on its way (`take` follows).
    func expect() { incoming.add(1, ordering: .relaxed) }

    /// Gives an accepted connection to this loop's daemon: at once on the loop's own thread,
    /// else at its next turn. After the loop stopped, the socket is closed.
    func take(_ socket: AcceptedSocket) {
        if isCurrent {
            add(socket)
            return
        }
        let signal = queue.withLock { queue -> Bool? in
            guard !queue.exited else { return nil }
            queue.sockets.append(socket)
            defer { queue.signalled = true }
            return !queue.signalled
        }
        switch signal {
        case nil: Glibc.close(socket.fd)
        case true?: notify()
        case false?: break
        }
    }

    /// MHD's notifications, on this loop.
    func connectionStarted() { connections.add(1, ordering: .relaxed) }
    func connectionClosed() { connections.subtract(1, ordering: .relaxed) }

    /// On the loop: the daemon owns the socket from now on (and closes it if it cannot take it).
    private func add(_ socket: AcceptedSocket) {
        var socket = socket
        if let daemon = daemon.value { _ = thumbd_mhd_add(daemon.raw, socket.fd, &socket.address, socket.length) }
        incoming.subtract(1, ordering: .relaxed)
    }

    // MARK: Watching suspended sockets (on the loop)

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

    // MARK: The loop

    private func run(_ daemon: OpaquePointer, _ listener: Listener) {
        var tokens = [UInt64](repeating: 0, count: 64)
        var hangups = [Int32](repeating: 0, count: 64)
        var batch: [RequestContext] = []
        var sockets: [AcceptedSocket] = []
        let clock = ContinuousClock()
        var nextReap = clock.now + Self.tick
        var pendingWork = false
        var accepting = true
        while true {
            // Never past MHD's own deadline (idle connections), nor the guard's next look.
            var timeout = max(0, Int((nextReap - clock.now).nanoseconds / 1_000_000) + 1)
            let due = thumbd_mhd_timeout_ms(daemon)
            if due >= 0 { timeout = min(timeout, Int(due)) }
            if pendingWork { timeout = 0 }
            let count = thumbd_watch_wait(epoll, &tokens, &hangups, Int32(tokens.count), Int32(timeout))
            if count < 0 && errno != EINTR { preconditionFailure("epoll_wait: \(String(cString: strerror(errno)))") }
            for (token, hangup) in zip(tokens.prefix(Int(max(count, 0))), hangups) {
                switch token {
                case Self.wakeToken:
                    var value: UInt64 = 0
                    _ = read(wakeFD, &value, 8)
                case Self.daemonToken:
                    break  // MHD_run below
                case Self.listenerToken:
                    // Out of descriptors: unwatched until the guard's next look, not woken at
                    // once again and again by a socket that stays readable.
                    if !listener.accept(on: self) {
                        accepting = thumbd_watch_remove(epoll, listener.fd) != 0
                    }
                default:
                    socketEvent(token, hangup: hangup != 0)
                }
            }
            // What other threads handed over: before MHD runs, so that a resume is seen in this
            // turn. What they add meanwhile is taken too, up to a bound (so MHD's connections
            // wait for no long burst): while the loop takes, they write no eventfd.
            var stopping = false
            var taken = 0
            while taken < Self.perTurn {
                stopping = queue.withLock { queue -> Bool in
                    swap(&batch, &queue.contexts)
                    swap(&sockets, &queue.sockets)
                    if batch.isEmpty && sockets.isEmpty { queue.signalled = false }  // from now on, an append wakes the loop
                    return queue.stopping
                }
                for socket in sockets { add(socket) }
                for context in batch { context.runOnLoop() }
                taken += batch.count + sockets.count
                if (batch.isEmpty && sockets.isEmpty) || stopping { break }
                batch.removeAll(keepingCapacity: true)
                sockets.removeAll(keepingCapacity: true)
            }
            batch.removeAll(keepingCapacity: true)
            sockets.removeAll(keepingCapacity: true)
            if stopping { return }
            // The bound reached with more queued: the next wait returns at once.
            pendingWork = queue.withLock { $0.signalled }
            _ = MHD_run(daemon)
            if clock.now >= nextReap {
                core.connections.reap(loop: index)
                if !accepting { accepting = thumbd_watch_listener(epoll, listener.fd, Self.listenerToken) == 0 }
                nextReap = clock.now + Self.tick
            }
        }
    }

    /// A watched socket's event: the client hung up, or there is room to write.
    private func socketEvent(_ token: UInt64, hangup: Bool) {
        let observer = watched.withLock { state -> RequestContext? in
            if hangup {
                guard let found = state.remove(token) else { return nil }
                _ = thumbd_watch_remove(epoll, found.fd)
                return found.context
            }
            // Room to write: keep watching for a hang-up (the shot is spent).
            guard let found = state.find(token) else { return nil }
            _ = thumbd_watch_rearm(epoll, found.fd, token, 0)
            return found.context
        }
        // Outside our lock: the context takes its own.
        if hangup { observer?.clientGone() } else { observer?.socketWritable() }
    }
}

/// A daemon handle: started once, run by one loop, stopped once after the loop exited.
struct DaemonHandle: @unchecked Sendable {  // a C handle used by its loop's thread alone, then stopped once
    let raw: OpaquePointer
}
