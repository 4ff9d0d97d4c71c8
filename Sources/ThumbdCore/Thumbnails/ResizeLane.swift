import Dispatch
import Foundation
import Support
import Synchronization
import Thumbnailer
import Upstream

/// The lane of expensive work: every resize runs here, and nothing else does, so the cheap
/// work (sniff, header check, hash, store, answer) on the processing stage never waits
/// behind one (imgproxy's workers semaphore and bounded queue).
///
/// - at most `workers` resizes at once, each on one of the lane's own threads
///   (`thumbd-resize`), where a still image is decoded, resized and (as JPEG) encoded; these
///   and libvips's own workers (an animation's frames, the other encoders) run at a lower priority (nice 10) than
///   the rest of the daemon: with every core busy
///   resizing, the kernel still runs a hit or a small miss first;
/// - at most `maxQueued` waiting: past that `submit` refuses at once (503 `busy`);
/// - admission by memory: a resize starts only while the estimates of those running plus its
///   own fit `maxMemoryBytes` (one alone always may: the plan refused any larger);
/// - the queue is ordered by urgency (a task on a screen first, then by priority: read at
///   each decision, as a batch's focus moves), then the cheaper first, then the older;
/// - a task whose waiters all left is dropped from the queue, or stopped while it runs
///   (`ResizeControl.cancel`: libvips stops at its next tile);
/// - a watchdog answers a running task's waiters 503 once `timeLimit` + `watchdogSlack` has
///   passed even if libvips has not returned (libheif's AVIF encode is one call it cannot
///   stop): the task keeps its worker and its memory until it really returns.
final class ResizeLane: Sendable {
    struct Configuration: Sendable {
        // What `thumbnails.*` sets (ThumbnailConfiguration holds the defaults).
        var workers: Int
        var maxQueued: Int
        var maxMemoryBytes: Int
        var timeLimit: Duration
        /// How long after the time limit the watchdog answers for a resize still running.
        var watchdogSlack: Duration = .milliseconds(500)
        /// Threads for streamed decodes (`thumbnails.streams` and the slots beyond them; 0: none).
        var streamWorkers = 0
        /// The nice value of the resize threads (the rest of the daemon runs at 0).
        var niceness: Int32 = ResizeLane.defaultNiceness
    }

    /// One resize: its cost, its order, what it runs, and how it is answered when it never
    /// runs or runs too long. Each of `run`, `dropped` and `timedOut` is the task's owner's
    /// (the variant source's), which completes the flight; a flight answers once.
    final class Task: Sendable {
        let cost: Int
        let urgency: Urgency
        fileprivate let sequence: UInt64
        fileprivate let state = Mutex(Phase.queued)
        /// What the owner gave: held until the task has run, been dropped or cancelled, and
        /// let go then, since the owner's closures hold the owner (a flight's job, which
        /// holds this task to cancel it) and the original's bytes.
        private let handlers: Mutex<Handlers?>

        private struct Handlers {
            let run: @Sendable (ResizeControl) -> Void
            let dropped: @Sendable (ThumbdError) -> Void
            let timedOut: @Sendable () -> Void
        }

        fileprivate enum Phase {
            case queued
            case running(ResizeControl)
            case cancelled
            case done
        }

        init(cost: Int, urgency: Urgency, sequence: UInt64, run: @escaping @Sendable (ResizeControl) -> Void,
             dropped: @escaping @Sendable (ThumbdError) -> Void, timedOut: @escaping @Sendable () -> Void) {
            self.cost = cost
            self.urgency = urgency
            self.sequence = sequence
            handlers = Mutex(Handlers(run: run, dropped: dropped, timedOut: timedOut))
        }

        /// Nobody waits any more: not started if queued, stopped if running.
        func cancel() {
            let control = state.withLock { phase -> ResizeControl? in
                switch phase {
                case .queued:
                    phase = .cancelled
                    return nil
                case .running(let control):
                    return control
                case .cancelled, .done:
                    return nil
                }
            }
            if let control { control.cancel() } else { release() }
        }

        /// Runs the owner's resize (once) under `control`.
        fileprivate func run(_ control: ResizeControl) {
            handlers.withLock { $0?.run }?(control)
        }

        /// Answers the owner that the task will never run, and lets go of it.
        func drop(_ error: ThumbdError) {
            let dropped = handlers.withLock { handlers in
                defer { handlers = nil }
                return handlers?.dropped
            }
            dropped?(error)
        }

        fileprivate func timeOut() { handlers.withLock { $0?.timedOut }?() }

        private func release() { handlers.withLock { $0 = nil } }

        fileprivate func start(timeLimit: Duration) -> ResizeControl? {
            state.withLock { phase in
                guard case .queued = phase else { return nil }
                let control = ResizeControl(timeLimit: timeLimit)
                phase = .running(control)
                return control
            }
        }

        var isCancelled: Bool {
            state.withLock { if case .cancelled = $0 { true } else { false } }
        }

        fileprivate func finish() {
            state.withLock { $0 = .done }
            release()
        }

        fileprivate var isRunning: Bool {
            state.withLock { if case .running = $0 { true } else { false } }
        }

        /// The order of the queue: (rank, cost, sequence) compares as "starts first".
        fileprivate static func startsBefore(_ a: (rank: Int, task: Task), _ b: (rank: Int, task: Task)) -> Bool {
            if a.rank != b.rank { return a.rank > b.rank }
            if a.task.cost != b.task.cost { return a.task.cost < b.task.cost }
            return a.task.sequence < b.task.sequence
        }
    }

    struct State {
        var queue: [Task] = []
        var idleWorkers: [Int]
        var running = 0
        var memoryInUse = 0
        var nextSequence: UInt64 = 0
        var stopped = false
        /// What waits for the lane to have nothing running (`stop()`).
        var idle: [DispatchSemaphore] = []
        var started = 0
        /// The running tasks, to stop them at shutdown.
        var runningTasks: [UInt64: Task] = [:]
        /// Streamed decodes running on the stream workers, the workers free for one, and how
        /// many of them have a thread yet (made on first need, then kept).
        var streamsRunning = 0
        var idleStreamWorkers: [Int] = []
        var streamThreads = 0
        /// Of `memoryInUse`, the running streams' unread bytes (`chargeStream`), and the
        /// highest the estimates alone have reached (the budget's bound, which tests read).
        var charged = 0
        var peakEstimated = 0

        /// Notes the estimates in use now against their peak.
        mutating func notePeak() { peakEstimated = max(peakEstimated, memoryInUse - charged) }

        /// The waiters of `stop()`, taken once nothing runs or waits (else none).
        mutating func idleWaiters() -> [DispatchSemaphore] {
            guard running == 0, streamsRunning == 0, queue.isEmpty else { return [] }
            defer { idle.removeAll() }
            return idle
        }
    }

    let configuration: Configuration
    let workers: [Worker]
    let threadsStarted = Atomic<Bool>(false)
    /// The workers of streamed decodes (`ResizeLane+Streams.swift`), at the daemon's priority.
    let streamWorkers: [Worker]
    /// The watchdogs' timers: a queue of the lane's own, so that a busy global queue cannot
    /// make one late.
    private let watchdogs = DispatchQueue(label: "thumbd.resize.watchdog")

    /// Runs `body` once the lane's time limit has passed, on the watchdogs' queue (a
    /// streamed decode's limit, which starts with its last byte rather than with a task).
    func afterTimeLimit(_ body: @escaping @Sendable () -> Void) {
        watchdogs.asyncAfter(deadline: .now() + configuration.timeLimit.dispatchInterval, execute: body)
    }
    let state: Mutex<State>  // internal: ResizeLane+Streams.swift takes it too
    /// Called (outside the lane's lock) each time a resize leaves the lane: its queue has room.
    let roomObserver = Slot<@Sendable () -> Void>()

    /// `observer` runs each time a resize leaves the lane (the queue may have room now).
    func onRoom(_ observer: @escaping @Sendable () -> Void) {
        roomObserver.set(observer)
    }

    /// Whether `submit` would take one more now.
    var hasRoom: Bool {
        state.withLock { state in
            state.queue.removeAll { $0.isCancelled }
            return !state.stopped && state.queue.count < configuration.maxQueued + state.idleWorkers.count
        }
    }

    var isStopped: Bool { state.withLock { $0.stopped } }

    /// The nice value of the resize threads (not a setting: the daemon runs at 0).
    static let defaultNiceness: Int32 = 10
    /// The name libvips gives the threads that compute tiles: the work runs there, not on
    /// the lane's thread, which waits.
    static let libvipsThreads = "libvips worker"

    init(configuration: Configuration) {
        self.configuration = configuration
        let count = max(1, configuration.workers)
        workers = (0..<count).map { _ in Worker() }
        streamWorkers = (0..<configuration.streamWorkers).map { _ in Worker() }
        state = Mutex(State(idleWorkers: Array((0..<count).reversed())))
    }

    /// Queues a resize. Returns nil when the queue is full or the lane has stopped (the
    /// caller answers 503), else the task (to cancel it when its waiters leave).
    func submit(cost: Int, urgency: Urgency, run: @escaping @Sendable (ResizeControl) -> Void,
                dropped: @escaping @Sendable (ThumbdError) -> Void, timedOut: @escaping @Sendable () -> Void) -> Task? {
        let task = state.withLock { state -> Task? in
            state.queue.removeAll { $0.isCancelled }
            // maxQueued counts those that wait: a free worker takes one more at once.
            guard !state.stopped, state.queue.count < configuration.maxQueued + state.idleWorkers.count else { return nil }
            state.nextSequence += 1
            let task = Task(cost: cost, urgency: urgency, sequence: state.nextSequence, run: run, dropped: dropped,
                            timedOut: timedOut)
            state.queue.append(task)
            return task
        }
        if task != nil { pump() }
        return task
    }

    /// Starts what fits: a free worker, and memory within the budget.
    func pump() {
        while let (task, worker) = state.withLock({ state -> (Task, Int)? in
            state.queue.removeAll { $0.isCancelled }
            guard !state.idleWorkers.isEmpty else { return nil }
            let budget = configuration.maxMemoryBytes
            // The first in the queue's order whose memory fits (urgencies change while tasks
            // wait, so the order is taken now; the queue holds at most maxQueued + workers).
            // One rule for resizes and streamed decodes (`startStream`): what fits the budget
            // beside what runs, or anything when nothing runs, so that one estimate larger
            // than the budget still runs, alone.
            let alone = state.running + state.streamsRunning == 0
            var best: (rank: Int, task: Task, index: Int)?
            for (index, task) in state.queue.enumerated() where alone || state.memoryInUse + task.cost <= budget {
                let candidate = (rank: task.urgency.rank, task: task)
                if best.map({ Task.startsBefore(candidate, ($0.rank, $0.task)) }) ?? true {
                    best = (candidate.rank, task, index)
                }
            }
            guard let index = best?.index else { return nil }
            let task = state.queue.remove(at: index)
            state.running += 1
            state.memoryInUse += task.cost
            state.notePeak()
            state.started += 1
            state.runningTasks[task.sequence] = task
            return (task, state.idleWorkers.removeLast())
        }) {
            workers[worker].deliver(.task(task))
        }
    }

    func execute(_ task: Task, on worker: Int) {
        if let control = task.start(timeLimit: configuration.timeLimit) {
            // libvips computes on its own pool of threads, started by GLib at nice 0 however
            // the lane's thread runs: those started since the last resize are lowered too.
            ThreadPriority.lower(threadsNamed: Self.libvipsThreads, to: configuration.niceness)
            let watchdog = DispatchWorkItem { [task] in
                guard task.isRunning else { return }
                // The waiters are answered the timeout first: stopped first, the resize could
                // return and answer them `shutting_down` (a cancelled resize's answer) before it.
                task.timeOut()
                control.cancel()
            }
            let slack = configuration.timeLimit + configuration.watchdogSlack
            watchdogs.asyncAfter(deadline: .now() + .nanoseconds(Int(slack / .nanoseconds(1))), execute: watchdog)
            task.run(control)
            task.finish()
            watchdog.cancel()
        } else {
            task.finish()  // cancelled while it waited: let go of what it held
        }
        let wake = state.withLock { state -> [DispatchSemaphore] in
            state.running -= 1
            state.memoryInUse -= task.cost
            state.runningTasks[task.sequence] = nil
            state.idleWorkers.append(worker)
            return state.idleWaiters()
        }
        for semaphore in wake { semaphore.signal() }
        pump()
        roomObserver.value?()
    }

    struct Load: Sendable, Equatable {
        var running: Int
        var queued: Int
        var memoryInUse: Int
        var started: Int
    }
}
