import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// What a resize flight runs: the resize's place in the `ResizeLane` once the original is
/// there, and whether anybody still waits for it. Its waiters leaving (clients and batches)
/// abandons it: a queued resize is never started, a running one is stopped.
final class ResizeJob: CoalescedJob {
    private struct State {
        var abandoned = false
        var task: ResizeLane.Task?
        /// Its place among the waiters of its original's download, while that runs.
        var original: FetchCoalescer.Ticket?
        /// A waiter wants a preview made from the same decode (a batch with previews).
        var wantsPreview = false
        /// A batch waits for it: when the lane's queue is full it waits for room rather than
        /// failing `busy` (a batch's items are bounded by the batch limits, and a waiting one
        /// holds no image bytes).
        var patient = false
        /// The preview once made (a data URI), and who waits for it.
        var preview: String?
        var previewObservers: [@Sendable (String) -> Void] = []
        /// Its original decoded while it downloads, when that could start.
        var stream: StreamedDecode?
    }

    private let state = Mutex(State())
    /// Read by the lane at each decision: a focus that changes while the resize waits moves it.
    let urgency: Urgency

    init(priority: Priority) {
        urgency = Urgency(priority)
    }

    /// The last waiter left: a queued resize is not started, a running one stops, a decode
    /// reading the download stops. Returns its place among the waiters of its original's
    /// download, for the caller to leave (aborted if nobody else waits for it either).
    func abandon() -> FetchCoalescer.Ticket? {
        let (task, original, stream) = state.withLock { state in
            state.abandoned = true
            defer { state.original = nil }
            return (state.task, state.original, state.stream)
        }
        task?.cancel()
        stream?.stop()
        return original
    }

    /// The decode that reads the original as it downloads (set once, before the download's
    /// body begins).
    var stream: StreamedDecode? {
        get { state.withLock { $0.stream } }
        set { state.withLock { $0.stream = newValue } }
    }

    /// It waits for its original's download with `ticket`, which `abandon` hands back.
    /// False when it was abandoned already: the caller leaves the download at once.
    func waitOnOriginal(_ ticket: FetchCoalescer.Ticket) -> Bool {
        state.withLock { state in
            guard !state.abandoned else { return false }
            state.original = ticket
            return true
        }
    }

    /// The original has come (or failed): there is no download left to leave.
    func originalArrived() {
        state.withLock { $0.original = nil }
    }

    var isAbandoned: Bool { state.withLock { $0.abandoned } }

    /// A waiter wants a preview: the resize makes one, if it has not started yet.
    func wantPreview() { state.withLock { $0.wantsPreview = true } }

    var wantsPreview: Bool { state.withLock { $0.wantsPreview } }

    func bePatient() { state.withLock { $0.patient = true } }

    var isPatient: Bool { state.withLock { $0.patient } }

    /// `observer` gets the preview once it is made (at once if it has been).
    func observePreview(_ observer: @escaping @Sendable (String) -> Void) {
        let made = state.withLock { state -> String? in
            if state.preview == nil { state.previewObservers.append(observer) }
            return state.preview
        }
        if let made { observer(made) }
    }

    /// The resize made its preview (before its encode): every observer gets it now.
    func publishPreview(_ uri: String) {
        let observers = state.withLock { state -> [@Sendable (String) -> Void] in
            state.preview = uri
            defer { state.previewObservers = [] }
            return state.previewObservers
        }
        for observer in observers { observer(uri) }
    }

    /// The lane took the resize; if the flight was abandoned meanwhile, it is cancelled now.
    func attach(_ task: ResizeLane.Task) {
        let abandoned = state.withLock { state -> Bool in
            state.task = task
            return state.abandoned
        }
        if abandoned { task.cancel() }
    }
}
