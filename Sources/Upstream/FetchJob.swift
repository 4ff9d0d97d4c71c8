import Support
import Synchronization

/// Queue order when the upstream concurrency limit is reached.
public enum Priority: Int, Sendable, Comparable, CaseIterable {
    case low = 0, normal = 1, high = 2

    public init?(parameter: String) {
        switch parameter {
        case "low": self = .low
        case "normal": self = .normal
        case "high": self = .high
        default: return nil
        }
    }

    public static func < (a: Priority, b: Priority) -> Bool { a.rawValue < b.rawValue }
}

/// The validators of a stored copy, sent as `If-None-Match` / `If-Modified-Since` so that
/// an unchanged image is answered `304` instead of downloaded again (RFC 9111 §4.3.1).
public struct Validators: Sendable, Equatable {
    public var etag: String?
    public var lastModified: String?

    public init(etag: String?, lastModified: String?) {
        self.etag = etag
        self.lastModified = lastModified
    }

    public var isEmpty: Bool { etag == nil && lastModified == nil }
}

/// What an origin sent for a successful fetch: a `200` with its body, or a `304` (empty
/// body) when the job carried validators and the origin says the stored copy is current.
public struct UpstreamResponse: Sendable {
    /// 200, or 304 for a conditional fetch whose copy is still current.
    public var status: Int
    public var body: Bytes
    public var etag: String?
    public var lastModified: String?
    public var cacheControl: String?
    public var expires: String?
    public var date: String?
}

/// Bytes received so far and the total when the origin said it.
public struct FetchProgress: Sendable, Equatable {
    public var received: Int64
    public var total: Int64?
}

/// What a body observer of a fetch hears: the body's bytes as they arrive, with all of the
/// body so far, these included (both valid only during the call: a reader that begins late
/// starts from `soFar`), then its end, whole (`true`) or not.
public enum BodyEvent {
    case bytes(UnsafeRawBufferPointer, soFar: UnsafeRawBufferPointer)
    case end(whole: Bool)
}

/// One upstream fetch as the rest of thumbd sees it: a URL, a priority that can only rise,
/// observable progress, and one completion. Shared between the submitting thread and the
/// transfer loop; every mutable part sits behind a lock.
public final class FetchJob: Sendable {
    public let url: String
    public let host: String
    /// Set for a revalidation: the stored copy's validators.
    public let validators: Validators?
    /// Which of `TransferLoops`' loops the job was given to (-1: none yet), for `cancel`.
    let loopIndex = Atomic<Int>(-1)
    private let state: Mutex<State>
    private let onProgress: @Sendable (FetchProgress) -> Void
    private let onComplete: @Sendable (FetchJob, Result<UpstreamResponse, UpstreamError>) -> Void

    /// Its place in the queue: priority and focus, which its waiters change while it waits.
    public let urgency: Urgency
    private struct State {
        var progress = FetchProgress(received: 0, total: nil)
        var completed = false
        var observers: [UInt64: @Sendable (FetchProgress) -> Void] = [:]
        var nextObserver: UInt64 = 0
        /// Who reads the body as it arrives (a resize decoding it while it downloads).
        var bodyObservers: [UInt64: @Sendable (BodyEvent) -> Void] = [:]
    }
    /// Whether anybody reads the body as it arrives: read on every write of the body, so
    /// that a fetch nobody taps takes no lock there.
    private let tapped = Atomic<Bool>(false)

    public init(
        url: String, host: String, priority: Priority, validators: Validators? = nil,
        onProgress: @escaping @Sendable (FetchProgress) -> Void = { _ in },
        onComplete: @escaping @Sendable (FetchJob, Result<UpstreamResponse, UpstreamError>) -> Void
    ) {
        self.url = url
        self.host = host
        self.validators = validators.flatMap { $0.isEmpty ? nil : $0 }
        self.urgency = Urgency(priority)
        self.state = Mutex(State())
        self.onProgress = onProgress
        self.onComplete = onComplete
    }

    public var priority: Priority { urgency.priority }
    public var progress: FetchProgress { state.withLock { $0.progress } }

    /// Raises the priority (a waiter with a higher priority joined); never lowers it.
    public func raisePriority(to priority: Priority) {
        urgency.raise(to: priority)
    }

    /// Adds an observer of progress (a batch item waiting on this fetch); returns its token.
    public func observeProgress(_ observer: @escaping @Sendable (FetchProgress) -> Void) -> UInt64 {
        state.withLock { state in
            state.nextObserver += 1
            state.observers[state.nextObserver] = observer
            return state.nextObserver
        }
    }

    public func stopObserving(_ token: UInt64) {
        state.withLock { _ = $0.observers.removeValue(forKey: token) }
    }

    /// Adds a reader of the body as it arrives; nil once the fetch has completed. A reader
    /// added after the body began reads it from the body so far, which every `.bytes`
    /// carries, at the next piece: a tap is never too late while bytes still come. One that
    /// must see the first bytes (an origin may send them and pause) is added before the job
    /// is submitted.
    public func observeBody(_ observer: @escaping @Sendable (BodyEvent) -> Void) -> UInt64? {
        state.withLock { state -> UInt64? in
            guard !state.completed else { return nil }
            state.nextObserver += 1
            state.bodyObservers[state.nextObserver] = observer
            tapped.store(true, ordering: .releasing)
            return state.nextObserver
        }
    }

    /// On the transfer loop: bytes of the body, in order, and the body so far.
    func publishBody(_ bytes: UnsafeRawBufferPointer, soFar: UnsafeRawBufferPointer) {
        guard tapped.load(ordering: .acquiring) else { return }
        let observers = state.withLock { Array($0.bodyObservers.values) }
        for observer in observers { observer(.bytes(bytes, soFar: soFar)) }
    }

    /// The body's readers hear its end and are let go (`whole`: every byte came, and the
    /// fetch succeeded). Also when a transfer starts over: they would see its bytes twice.
    func endBody(whole: Bool) {
        guard tapped.load(ordering: .acquiring) else { return }
        let observers = state.withLock { state in
            defer { state.bodyObservers = [:] }
            return Array(state.bodyObservers.values)
        }
        for observer in observers { observer(.end(whole: whole)) }
    }

    func publishProgress(_ progress: FetchProgress) {
        let observers = state.withLock { state in
            state.progress = progress
            return Array(state.observers.values)
        }
        onProgress(progress)
        for observer in observers { observer(progress) }
    }

    /// Delivers the outcome once; later calls are ignored.
    func complete(_ result: Result<UpstreamResponse, UpstreamError>) {
        let first = state.withLock { state -> Bool in
            defer { state.completed = true }
            return !state.completed
        }
        guard first else { return }
        if case .success(let response) = result { endBody(whole: response.status == 200) } else { endBody(whole: false) }
        onComplete(self, result)
    }
}
