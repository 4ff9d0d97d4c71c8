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
        /// Memory all downloaded bodies may hold together, every loop's: from a body's first
        /// byte until it is freed (`DownloadBudget`). Past it transfers pause; one at a time
        /// may go past it by one body (`maxObjectBytes`), so one always moves, and small
        /// bodies take from a reserve of an eighth more.
        public var maxBufferedBytes = 128 << 20

        public init() {}
    }

    private enum Command {
        case submit(FetchJob)
        case cancel(FetchJob)
        case apply(Configuration)
        case stop
    }

    private let multi: MultiHandle
    private let inbox = Mutex<[Command]>([])
    /// Jobs submitted and not yet completed (queued + running), and how many may be.
    private let outstanding = Mutex((count: 0, capacity: 0))
    private let budget: DownloadBudget
    /// Transfers running and waiting, as of the loop's last turn.
    private let published = Mutex(Load(running: 0, queued: 0))
    private let finished = DispatchSemaphore(value: 0)
    /// What the loop's thread needs, until `start()` hands it over.
    private let unstarted: Mutex<LoopState?>
    private let running = Mutex(true)

    /// A loop of its own, with a budget of its own (`TransferLoops` gives its loops one).
    public convenience init(configuration: Configuration, logger: Logger = Logger(label: "thumbd.fetch")) {
        self.init(configuration: configuration, budget: DownloadBudget(limit: configuration.maxBufferedBytes), logger: logger)
    }

    init(configuration: Configuration, budget: DownloadBudget, logger: Logger) {
        _ = Curl.initialized
        self.budget = budget
        let multi = MultiHandle(maxConnectionsPerHost: configuration.maxConnectionsPerHost,
                                keptConnections: configuration.maxConcurrent)
        self.multi = multi
        unstarted = Mutex(LoopState(multi: multi, configuration: configuration, budget: budget, logger: logger))
        outstanding.withLock { $0.capacity = Self.capacity(configuration) }
        budget.wake(multi)
    }

    /// Starts the loop's thread; once. Jobs submitted before wait in its inbox until then.
    public func start() {
        guard let state = unstarted.withLock({ state in defer { state = nil }; return state }) else { return }
        let thread = Thread { [self] in
            ThreadName.set("thumbd-fetch")
            state.onFinished = { [self] in outstanding.withLock { $0.count -= 1 } }
            state.publish = { [self] load in published.withLock { $0 = load } }
            run(state)
            finished.signal()
        }
        thread.name = "thumbd-fetch"
        thread.start()
    }

    /// Queues `job`. Returns false (and does not queue it) when the queue is full.
    public func submit(_ job: FetchJob) -> Bool {
        let admitted = outstanding.withLock { outstanding -> Bool in
            guard outstanding.count < outstanding.capacity else { return false }
            outstanding.count += 1
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
    var outstandingJobs: Int { outstanding.withLock { $0.count } }

    private static func capacity(_ configuration: Configuration) -> Int { configuration.maxQueued + configuration.maxConcurrent }

    /// New limits and transfer settings (a reload), from the loop's next turn: transfers
    /// running keep what they started with; jobs already queued past a smaller queue stay.
    public func apply(_ configuration: Configuration) {
        outstanding.withLock { $0.capacity = Self.capacity(configuration) }
        send(.apply(configuration))
    }

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
        // A loop never started still has its thread end what was queued, the one way a
        // shutdown answers waiters.
        start()
        send(.stop)
        finished.wait()
        budget.stopWaking(multi)  // before its eventfd closes
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
                case .apply(let configuration):
                    state.apply(configuration)
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
            state.resumeWaiting()
            state.publishLoad()
        }
        state.abortAll(with: .shuttingDown)
    }
}
