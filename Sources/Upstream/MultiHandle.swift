import Support
internal import CCurl
import Foundation
import Glibc
import Logging
import Synchronization

/// The multi handle, the epoll set its sockets are watched in, and the eventfd that wakes
/// the loop. `wakeup` may be called from any thread (a write to the eventfd); everything
/// else happens on the loop thread or after it has exited (`close`). That is the argument
/// for `@unchecked Sendable`. curl tells it which sockets to watch and when its timer is
/// due through two callbacks, whose context pointer is this object (unretained: it outlives
/// the multi handle, which `close` cleans up first).
final class MultiHandle: @unchecked Sendable {  // loop thread only, but `wakeup` (an eventfd write)
    let handle: UnsafeMutableRawPointer
    private let epoll: Int32
    private let wakeFD: Int32
    /// When curl wants `curl_multi_socket_action(CURL_SOCKET_TIMEOUT)`; nil: no timer.
    private var timerDue: ContinuousClock.Instant?
    /// Connections open at once to one host, and kept idle for reuse. Set again by a reload:
    /// curl applies them to the connections it opens or keeps next.
    func setLimits(maxConnectionsPerHost: Int, keptConnections: Int) {
        _ = thumbd_curl_multi_setopt_long(handle, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
        _ = thumbd_curl_multi_setopt_long(handle, CURLMOPT_MAXCONNECTS, keptConnections)
    }

    /// What one wait reports: ready descriptors and curl's CURL_CSELECT_* bits for each.
    private var readyFDs = [Int32](repeating: 0, count: 128)
    private var readyBits = [Int32](repeating: 0, count: 128)
    private var closed = false

    init(maxConnectionsPerHost: Int, keptConnections: Int) {
        guard let multi = curl_multi_init() else { fatalError("curl_multi_init failed: out of memory") }
        handle = multi
        epoll = thumbd_curl_epoll_create()
        wakeFD = thumbd_curl_eventfd()
        precondition(epoll >= 0 && wakeFD >= 0, "epoll/eventfd: \(String(cString: strerror(errno)))")
        precondition(thumbd_curl_epoll_watch(epoll, wakeFD, Int32(CURL_POLL_IN), 0) == 0,
                     "epoll_ctl: \(String(cString: strerror(errno)))")
        // HTTP/2 origins: many transfers over one connection.
        _ = thumbd_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, thumbd_curl_pipe_multiplex)
        // Connections kept open for reuse when idle. curl's default is four per transfer
        // still running, so a burst's connections are closed as its last transfers end and
        // the next burst connects (and shakes hands over TLS) all over again: a grid, a
        // pause, the next grid. As many as can run at once (nginx: `keepalive`); curl
        // closes one idle for CURLOPT_MAXAGE_CONN (118 s) and retries a request on a kept
        // connection the origin has closed meanwhile.
        setLimits(maxConnectionsPerHost: maxConnectionsPerHost, keptConnections: keptConnections)
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = thumbd_curl_multi_setopt_ptr(multi, CURLMOPT_SOCKETDATA, me)
        _ = thumbd_curl_multi_setopt_socketfn(multi) { _, socket, what, user, socketPointer in
            Unmanaged<MultiHandle>.fromOpaque(user!).takeUnretainedValue().watch(socket, what, known: socketPointer != nil)
        }
        _ = thumbd_curl_multi_setopt_ptr(multi, CURLMOPT_TIMERDATA, me)
        _ = thumbd_curl_multi_setopt_timerfn(multi) { _, milliseconds, user in
            Unmanaged<MultiHandle>.fromOpaque(user!).takeUnretainedValue().setTimer(milliseconds)
        }
    }

    func wakeup() { thumbd_curl_eventfd_signal(wakeFD) }

    /// CURLMOPT_SOCKETFUNCTION: watch `socket` for what curl waits for, or no more. A socket
    /// seen for the first time is marked (`curl_multi_assign`, forgotten by curl at its
    /// CURL_POLL_REMOVE) so that its later changes are one `EPOLL_CTL_MOD`, not a failed
    /// MOD and an ADD: a pooled connection is removed and watched again on every transfer.
    private func watch(_ socket: curl_socket_t, _ what: Int32, known: Bool) -> Int32 {
        guard thumbd_curl_epoll_watch(epoll, socket, what, known ? 1 : 0) == 0 else { return -1 }
        if !known, what != CURL_POLL_REMOVE {
            _ = curl_multi_assign(handle, socket, Unmanaged.passUnretained(self).toOpaque())
        }
        return 0
    }

    /// CURLMOPT_TIMERFUNCTION: -1 removes the timer; 0 means as soon as possible.
    private func setTimer(_ milliseconds: Int) -> Int32 {
        timerDue = milliseconds < 0 ? nil : .now + .milliseconds(milliseconds)
        return 0
    }

    /// Waits until a watched socket is ready, the timer is due, a wake-up, or at most
    /// `maxMilliseconds`; then lets curl act on each ready socket and on its timer. On a
    /// wake-up, `onWakeup` runs first, and the transfers it adds start (curl's timer) before
    /// the ready sockets are read.
    func waitAndAct(maxMilliseconds: Int, onWakeup: () -> Void) {
        var timeout = maxMilliseconds
        if let due = timerDue {
            let left = due - .now
            // Rounded up: waking a little early would only spin.
            timeout = left <= .zero ? 0 : min(timeout, Int((left / .milliseconds(1)).rounded(.up)))
        }
        let ready = max(0, Int(thumbd_curl_epoll_wait(epoll, &readyFDs, &readyBits, Int32(readyFDs.count), Int32(timeout))))
        var running: Int32 = 0
        if readyFDs[0..<ready].contains(wakeFD) {
            thumbd_curl_eventfd_drain(wakeFD)
            onWakeup()
            fireTimerIfDue(&running)
        }
        for index in 0..<ready where readyFDs[index] != wakeFD {
            let rc = curl_multi_socket_action(handle, readyFDs[index], readyBits[index], &running)
            precondition(rc == CURLM_OK, "curl_multi_socket_action: \(rc)")
        }
        fireTimerIfDue(&running)
    }

    private func fireTimerIfDue(_ running: inout Int32) {
        guard let due = timerDue, due <= .now else { return }
        timerDue = nil
        let rc = curl_multi_socket_action(handle, thumbd_curl_socket_timeout, 0, &running)
        precondition(rc == CURLM_OK, "curl_multi_socket_action(timeout): \(rc)")
    }

    func close() {
        guard !closed else { return }
        closed = true
        curl_multi_cleanup(handle)  // may still call `watch` for the connections it closes
        Glibc.close(epoll)
        Glibc.close(wakeFD)
    }

    deinit { assert(closed, "MultiHandle was not closed") }
}
