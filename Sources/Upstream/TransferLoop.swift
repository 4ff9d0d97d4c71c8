import Support
internal import CCurl
import Foundation
import Glibc
import Logging
import Synchronization

/// Runs every upstream transfer on one curl multi handle, on one thread of its own.
///
/// Other threads talk to it only through `submit` and `cancel`, which put a command in a
/// locked inbox and wake the loop (an eventfd). The loop drives curl's multi_socket
/// interface from one epoll set: each turn costs what is ready, not what is running
/// (`curl_multi_poll` and `curl_multi_perform` visit every transfer on every turn).
///
/// Admission: at most `maxConcurrent` transfers, at most `maxPerHost` per host; the rest
/// wait in a queue ordered by priority, then by arrival. A full queue refuses at once (503)
/// rather than letting latency grow without bound.
public final class TransferLoop: Sendable {
    /// The loop's limits and the transfers' settings, in its own terms.
    public struct Configuration: Sendable {
        /// Transfers running at once, all hosts together.
        public var maxConcurrent = 256
        /// Transfers running at once to one host: a politeness cap, off (0) by default.
        /// Over HTTP/2 many transfers share one connection, so the limit that protects an
        /// origin is `maxConnectionsPerHost`.
        public var maxPerHost = 0
        /// Connections open at once to one host (curl's `CURLMOPT_MAX_HOST_CONNECTIONS`):
        /// over HTTP/1.1 one per running transfer, over HTTP/2 one carries many. A transfer
        /// past it waits inside curl for a connection.
        public var maxConnectionsPerHost = 128
        /// Jobs waiting for a slot; past this `submit` refuses.
        public var maxQueued = 10_000
        public var connectTimeoutMilliseconds = 5_000
        /// The whole transfer, redirects included.
        public var timeoutMilliseconds = 30_000
        /// Abort a transfer slower than this for this long.
        public var lowSpeedBytesPerSecond = 1_024
        public var lowSpeedSeconds = 10
        /// A larger body is refused, checked while it streams in.
        public var maxObjectBytes = 20 << 20
        public var maxRedirects = 5
        /// The User-Agent sent to origins (nil: none); the product names its release here.
        public var userAgent: String?
        /// PEM file of the certificate authorities trusted for https origins; nil: the
        /// system's. Verification is always on.
        public var caFile: String?
        /// Every fetch goes through this HTTP proxy (a parent cache), e.g.
        /// `http://10.0.0.5:6081`; nil: straight to the origin.
        public var proxy: String?
        /// Asked before every connect (every hop, every address tried): the caller's policy.
        public var connectCheck = ConnectCheck.anything

        public init() {}
    }

    private enum Command {
        case submit(FetchJob)
        case cancel(FetchJob)
        case stop
    }

    private let multi: MultiHandle
    private let inbox = Mutex<[Command]>([])
    /// Jobs submitted and not yet completed (queued + running).
    private let outstanding = Mutex(0)
    private let configuration: Configuration
    /// Transfers running and waiting, as of the loop's last turn.
    private let published = Mutex(Load(running: 0, queued: 0))
    private let finished = DispatchSemaphore(value: 0)
    private let running = Mutex(true)

    public init(configuration: Configuration, logger: Logger = Logger(label: "thumbd.fetch")) {
        _ = Curl.initialized
        self.configuration = configuration
        self.multi = MultiHandle(maxConnectionsPerHost: configuration.maxConnectionsPerHost,
                                 keptConnections: configuration.maxConcurrent)
        let state = LoopState(multi: multi, configuration: configuration, logger: logger)
        let thread = Thread { [self] in
            ThreadName.set("thumbd-fetch")
            state.onFinished = { [self] in outstanding.withLock { $0 -= 1 } }
            state.publish = { [self] load in published.withLock { $0 = load } }
            run(state)
            finished.signal()
        }
        thread.name = "thumbd-fetch"
        thread.start()
    }

    /// Queues `job`. Returns false (and does not queue it) when the queue is full.
    public func submit(_ job: FetchJob) -> Bool {
        let admitted = outstanding.withLock { count -> Bool in
            guard count < configuration.maxQueued + configuration.maxConcurrent else { return false }
            count += 1
            return true
        }
        guard admitted else { return false }
        send(.submit(job))
        return true
    }

    public struct Load: Sendable, Equatable {
        public var running: Int
        public var queued: Int
    }

    /// Transfers running and waiting for a slot, as of the loop's last turn (for metrics).
    public var load: Load { published.withLock { $0 } }

    /// Jobs submitted and not yet completed, now (`TransferLoops` gives a new job to the
    /// loop with the fewest).
    var outstandingJobs: Int { outstanding.withLock { $0 } }

    /// Stops `job` if it is queued or running; it then completes with `.cancelled`.
    public func cancel(_ job: FetchJob) { send(.cancel(job)) }

    /// Aborts everything still queued or running (each job completes with `shuttingDown`)
    /// and waits for the loop thread to exit.
    public func shutdown() {
        let wasRunning = running.withLock { value in
            defer { value = false }
            return value
        }
        guard wasRunning else { return }
        send(.stop)
        finished.wait()
        multi.close()
    }

    private func send(_ command: Command) {
        inbox.withLock { $0.append(command) }
        multi.wakeup()
    }

    private func run(_ state: LoopState) {
        // Commands are taken at the top of each turn and again as soon as a wake-up is seen,
        // before the turn's ready sockets: a fetch submitted during a burst of answers
        // starts (its request is sent) before those answers are read, not after.
        var stopping = false
        func takeCommands() {
            let commands = inbox.withLock { inbox in
                defer { inbox.removeAll(keepingCapacity: true) }
                return inbox
            }
            for command in commands {
                switch command {
                case .submit(let job): state.enqueue(job)
                case .cancel(let job):
                    state.cancel(job, with: .cancelled)
                case .stop:
                    stopping = true
                }
            }
            if !stopping { state.admit() }
        }
        while true {
            takeCommands()
            if stopping { break }
            multi.waitAndAct(maxMilliseconds: 1000, onWakeup: takeCommands)
            if stopping { break }
            if state.reapFinished() > 0 { state.admit() }  // freed slots go to the queue at once
            state.publishLoad()
        }
        state.abortAll(with: .shuttingDown)
    }
}

/// Which connections a transfer may make: asked with the address curl resolved (before the
/// socket exists) and with the host of each hop. The product passes its destination policy.
public struct ConnectCheck: Sendable {
    public var allowsAddress: @Sendable (IPAddress) -> Bool
    public var allowsHost: @Sendable (String) -> Bool

    public init(allowsAddress: @escaping @Sendable (IPAddress) -> Bool, allowsHost: @escaping @Sendable (String) -> Bool) {
        self.allowsAddress = allowsAddress
        self.allowsHost = allowsHost
    }

    /// No restriction (tests of the loop itself).
    public static let anything = ConnectCheck(allowsAddress: { _ in true }, allowsHost: { _ in true })
}

/// The multi handle, the epoll set its sockets are watched in, and the eventfd that wakes
/// the loop. `wakeup` may be called from any thread (a write to the eventfd); everything
/// else happens on the loop thread or after it has exited (`close`). That is the argument
/// for `@unchecked Sendable`. curl tells it which sockets to watch and when its timer is
/// due through two callbacks, whose context pointer is this object (unretained: it outlives
/// the multi handle, which `close` cleans up first).
private final class MultiHandle: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private let epoll: Int32
    private let wakeFD: Int32
    /// When curl wants `curl_multi_socket_action(CURL_SOCKET_TIMEOUT)`; nil: no timer.
    private var timerDue: ContinuousClock.Instant?
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
        _ = thumbd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
        // Connections kept open for reuse when idle. curl's default is four per transfer
        // still running, so a burst's connections are closed as its last transfers end and
        // the next burst connects (and shakes hands over TLS) all over again: a grid, a
        // pause, the next grid. As many as can run at once (nginx: `keepalive`); curl
        // closes one idle for CURLOPT_MAXAGE_CONN (118 s) and retries a request on a kept
        // connection the origin has closed meanwhile.
        _ = thumbd_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, keptConnections)
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

/// Everything the loop thread owns: the queue, the running transfers, per-host counts.
private final class LoopState: @unchecked Sendable {  // handed to the loop thread once, used only there
    private let multi: MultiHandle
    private let configuration: TransferLoop.Configuration
    private let logger: Logger
    private var admission: Admission<FetchJob>
    private var running: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Called once per job that leaves the loop (done, cancelled or aborted).
    var onFinished: () -> Void = {}
    var publish: (TransferLoop.Load) -> Void = { _ in }

    func publishLoad() { publish(TransferLoop.Load(running: running.count, queued: admission.queued.count)) }

    init(multi: MultiHandle, configuration: TransferLoop.Configuration, logger: Logger) {
        self.multi = multi
        self.configuration = configuration
        self.logger = logger
        self.admission = Admission(maxConcurrent: configuration.maxConcurrent,
                                   maxPerHost: configuration.maxPerHost > 0 ? configuration.maxPerHost : Int.max,
                                   host: { $0.host }, rank: { $0.urgency.rank })
    }

    func enqueue(_ job: FetchJob) { admission.enqueue(job) }

    /// Starts queued jobs while there is room.
    func admit() {
        for job in admission.admit() { start(job) }
    }

    private func start(_ job: FetchJob, isRetry: Bool = false) {
        let transfer = Transfer(job: job, configuration: configuration, isRetry: isRetry)
        let rc = curl_multi_add_handle(multi.handle, transfer.easy)
        precondition(rc == CURLM_OK, "curl_multi_add_handle: \(rc)")
        running[transfer.easy] = transfer
        logger.debug("fetch.start", metadata: ["upstream.url": "\(job.url)", "fetch.running": "\(running.count)"])
    }

    /// Completes every transfer curl reports as done; returns how many.
    func reapFinished() -> Int {
        var reaped = 0
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi.handle, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            guard let transfer = running[easy] else { continue }
            let outcome = transfer.outcome(code)
            // An answer that is not HTTP on a connection kept from an earlier transfer is
            // most likely that transfer's leftovers (an origin that sent more than its
            // Content-Length): the request is tried once more on a new connection, as
            // browsers retry an idempotent request that failed on a reused connection.
            if case .failure(.badResponse) = outcome, !transfer.isRetry, transfer.reusedConnection {
                running.removeValue(forKey: easy)
                curl_multi_remove_handle(multi.handle, easy)
                logger.debug("fetch.retry", metadata: ["upstream.url": "\(transfer.job.url)"])
                transfer.job.endBody(whole: false)  // its readers would see the new attempt's bytes after the old's
                start(transfer.job, isRetry: true)  // keeps its admission slot
                continue
            }
            _ = detach(easy)
            logger.debug("fetch.done", metadata: [
                "upstream.url": "\(transfer.job.url)", "curl.code": "\(code.rawValue)",
                "fetch.bytes": "\((try? outcome.get())?.body.count ?? transfer.bytesReceived)",
            ])
            transfer.job.complete(outcome)
            onFinished()
            reaped += 1
        }
        return reaped
    }

    func cancel(_ job: FetchJob, with error: UpstreamError) {
        if admission.removeQueued(job) {
            job.complete(.failure(error))
            onFinished()
            return
        }
        if let (easy, _) = running.first(where: { $0.value.job === job }) {
            _ = detach(easy)
            job.complete(.failure(error))
            onFinished()
        }
    }

    func abortAll(with error: UpstreamError) {
        for job in admission.removeAllQueued() {
            job.complete(.failure(error))
            onFinished()
        }
        for easy in Array(running.keys) {
            if let transfer = detach(easy) {
                transfer.job.complete(.failure(error))
                onFinished()
            }
        }
    }

    private func detach(_ easy: UnsafeMutableRawPointer) -> Transfer? {
        guard let transfer = running.removeValue(forKey: easy) else { return nil }
        curl_multi_remove_handle(multi.handle, easy)
        admission.finished(transfer.job)
        return transfer
    }
}
