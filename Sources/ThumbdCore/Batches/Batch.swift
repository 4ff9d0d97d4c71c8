import BlobStore
import Foundation
import Support
import Synchronization
import Upstream

/// One batch: its items' states and its event log. Every state change and its event are
/// made under one lock, so the log's order is the order things happened, and `end` is
/// always last. Subscribers are woken after the lock is released.
package final class Batch: Sendable {
    package enum ItemState: String, Sendable { case queued, fetching, done, failed, cancelled }

    struct Item {
        let index: Int
        let clientID: String?
        let url: String
        var src: String?
        var state: ItemState = .queued
        var ticket: FlightTicket?
        var job: FetchJob?
        var observer: UInt64?
        var lastProgress: ContinuousClock.Instant?
        var knewTotal = false
        /// How much of its original had arrived at the last progress (nil: unknown).
        var arrived: Double?
        /// On screen now (`focus`); then every job it waits on is focused too.
        var focused = false
        /// The queue places of the jobs it waits on (its resize, its original's fetch).
        var urgencies: [Urgency] = []
        /// When it last left the screen (nil: on screen, or never shown).
        var leftScreen: ContinuousClock.Instant?
        /// Cancelled because it was off screen: taken up again if it comes back.
        var cancelledOffscreen = false
        /// Its preview went out (in a `preview` event or in `done`).
        var previewSent = false
        var isTerminal: Bool { state == .done || state == .failed || state == .cancelled }

        /// Focuses or unfocuses the jobs it waits on (under the batch's lock).
        mutating func setFocused(_ focused: Bool) {
            guard focused != self.focused else { return }
            self.focused = focused
            for urgency in urgencies { if focused { urgency.focus() } else { urgency.unfocus() } }
        }

        /// Queued again (taken up after a cancel, or yielding to a new screen): what its last
        /// download said is forgotten.
        mutating func requeue() {
            state = .queued
            lastProgress = nil
            knewTotal = false
            arrived = nil
        }

        /// It no longer waits on its jobs (finished, cancelled): its focus leaves them.
        mutating func detach() {
            if focused { for urgency in urgencies { urgency.unfocus() } }
            urgencies = []
            ticket = nil
        }
    }

    struct State {
        var items: [Item]
        var done = 0
        var failed = 0
        var cancelled = 0
        var finishedAt: ContinuousClock.Instant?
        /// Previews being made for items already done: `end` waits for them (each ends once:
        /// made, dropped, refused or timed out).
        var pendingPreviews = 0
        /// Items off screen not started yet: they wait until every item on screen has
        /// finished (or `releaseDeferred` is called), so the screen's downloads and resizes
        /// have the network and the cores to themselves.
        var deferred: Set<Int> = []
        /// The client has said what is on screen (`focus`).
        var screenKnown = false

        /// Whether an item on screen is still to finish.
        var screenBusy: Bool { items.contains { $0.focused && !$0.isTerminal && !deferred.contains($0.index) } }

        /// The deferred items, once nothing on screen is left to finish (emptied).
        mutating func releasable() -> [Int] {
            guard !deferred.isEmpty, !screenBusy else { return [] }
            defer { deferred = [] }
            return deferred.sorted()
        }
    }

    /// Starts items that were deferred (set by the registry); called outside the lock.
    let startDeferred = Slot<@Sendable ([Int]) -> Void>()

    /// With screen first: an item that leaves the screen before half its original has come
    /// gives way to the new screen. Its download is left (aborted when nobody else waits)
    /// and it waits among the deferred, as an item never shown does, until the new screen
    /// is done: a scrolled-away screen's downloads would otherwise share the network, the
    /// origin and the cores with the one now shown.
    let yieldsOffscreen: Bool

    /// `"cancelOffscreen": true`: items that left the screen long ago are cancelled.
    let cancelOffscreen: Bool

    package let id: String
    let log: EventLog
    /// Its record in the store (nil: not kept across a restart).
    let journal: BatchJournal?
    let started: ContinuousClock.Instant
    private let progressInterval: Duration
    let state: Mutex<State>  // internal: the extensions in Batch+*.swift take it too

    init(id: String, items: [(clientID: String?, url: String)], progressInterval: Duration,
         cancelOffscreen: Bool = false, yieldsOffscreen: Bool = false, journal: BatchJournal? = nil,
         started: ContinuousClock.Instant = .now) {
        self.cancelOffscreen = cancelOffscreen
        self.yieldsOffscreen = yieldsOffscreen
        self.started = started
        self.journal = journal
        var record: (@Sendable (Int, String, String) -> Void)?
        if let journal { record = { id, name, json in journal.record(id, name, json) } }
        let log = EventLog(record: record, visibleBelow: journal?.committedBelow)
        journal?.onCommit { [weak log] id in log?.release(below: id) }
        self.log = log
        self.id = id
        self.progressInterval = progressInterval
        self.state = Mutex(State(items: items.enumerated().map { Item(index: $0.offset, clientID: $0.element.clientID, url: $0.element.url) }))
    }

    var isFinished: Bool { state.withLock { $0.finishedAt != nil } }
    func url(of index: Int) -> String { state.withLock { $0.items[index].url } }
    var finishedAt: ContinuousClock.Instant? { state.withLock { $0.finishedAt } }
    var count: Int { state.withLock { $0.items.count } }

    /// Memory a kept batch holds, roughly: its event log and its items' strings.
    /// Computed once the batch is finished (it no longer changes), at every call before.
    var retainedBytes: Int {
        if let known = finishedBytes.withLock({ $0 }) { return known }
        let (items, finished) = state.withLock { state in
            (state.items.reduce(0) { $0 + MemoryLayout<Item>.stride + $1.url.utf8.count + ($1.src?.utf8.count ?? 0)
                + ($1.clientID?.utf8.count ?? 0) }, state.finishedAt != nil)
        }
        let bytes = items + log.retainedBytes
        if finished { finishedBytes.withLock { $0 = bytes } }
        return bytes
    }
    private let finishedBytes = Mutex<Int?>(nil)

    // MARK: Transitions

    /// The item now waits on a flight (a fetch or a resize): remember how to leave it,
    /// follow the original's download when one runs, and, when it is on screen, put the
    /// jobs it waits on (`urgencies`) at the head of their queues.
    func attach(_ index: Int, ticket: FlightTicket?, job: FetchJob?, urgencies: [Urgency] = []) {
        let observer = job?.observeProgress { [weak self] progress in self?.progress(index, progress) }
        let orphaned = state.withLock { state -> Bool in
            if state.items[index].isTerminal { return true }  // finished before we got here
            state.items[index].ticket = ticket
            state.items[index].job = job
            state.items[index].observer = observer
            state.items[index].urgencies = urgencies
            if state.items[index].focused { for urgency in urgencies { urgency.focus() } }
            return false
        }
        if orphaned, let observer { job?.stopObserving(observer) }
        // A download already under way (another client's, or this batch's before a restart
        // of the item) published its progress before we observed it: say where it stands
        // now, not only at its next piece, which a stalled origin may not send for a while.
        if !orphaned, let job { showProgressSoFar(index, of: job) }
    }

    /// The progress of `job` so far, as an event for item `index`, if any bytes have come.
    func showProgressSoFar(_ index: Int, of job: FetchJob) {
        let sofar = job.progress
        if sofar.received > 0 { progress(index, sofar) }
    }

    func setSource(_ index: Int, src: String) {
        state.withLock { $0.items[index].src = src }
    }

    func progress(_ index: Int, _ progress: FetchProgress) {
        let woken = state.withLock { state -> [EventSubscriber] in
            var item = state.items[index]
            // A complete transfer's last progress is followed at once by done, which says
            // the same: sending both would wake every subscriber twice.
            guard !item.isTerminal, progress.received != progress.total else { return [] }
            item.state = .fetching
            item.arrived = progress.total.map { Double(progress.received) / Double(max(1, $0)) }
            // A page that says what is on screen shows progress there only: an item off
            // screen changes state, but sends no progress events (each one is a wake-up and
            // a redraw in every subscriber's page).
            guard !state.screenKnown || item.focused else {
                state.items[index] = item
                return []
            }
            let now = ContinuousClock.now
            let totalNowKnown = !item.knewTotal && progress.total != nil
            defer { state.items[index] = item }
            guard totalNowKnown || item.lastProgress.map({ now - $0 >= progressInterval }) ?? true else { return [] }
            item.lastProgress = now
            item.knewTotal = item.knewTotal || progress.total != nil
            return log.append("progress", """
                {"index":\(index),"received":\(progress.received),"total":\(progress.total.map(String.init) ?? "null")}
                """)
        }
        wake(woken)
    }

    /// `inline`: the largest image sent inside `done` as a data URI (0: none).
    func succeed(_ index: Int, object: CachedObject, cache: String, preview: String? = nil, inline: Int = 0) {
        // A preview already sent is not repeated in `done`.
        let preview = preview.flatMap { uri in
            state.withLock { state -> String? in
                guard !state.items[index].previewSent else { return nil }
                state.items[index].previewSent = true
                return uri
            }
        }
        // The inline image goes to the stream, not to the journal: after a restart `src`
        // answers the same bytes, and the journal stays small.
        let inlined = object.body.count <= inline
            ? ",\"inline\":\"data:\(object.contentType);base64,\(Self.base64(object.body))\"" : ""
        finish(index, as: .done) { item, elapsed in
            let fields = """
                {"index":\(index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url)),\
                "src":\(Self.json(item.src)),"status":200,"bytes":\(object.body.count),\
                "contentType":\(JSONText.quote(object.contentType)),"cache":"\(cache)","ms":\(elapsed)\
                \(preview.map { ",\"preview\":\(JSONText.quote($0))" } ?? "")
                """
            return (fields + inlined + "}", inlined.isEmpty ? nil : fields + "}")
        }
    }

    private static func base64(_ body: Bytes) -> String {
        body.withUnsafeBytes { Data($0).base64EncodedString() }
    }

    func fail(_ index: Int, error: ThumbdError) {
        // Cut short by a shutdown whose restart takes the batch up again: not an outcome.
        // The item stays unfinished (so does the stream, which the shutdown closes), and the
        // restarted daemon makes it; a reconnecting EventSource gets its done from there.
        if error.code == .shuttingDown, journal?.isClosed == true { return }
        finish(index, as: .failed) { item, _ in
            ("""
            {"index":\(index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url)),\
            "status":\(error.status),"error":\(JSONText.quote(error.code.rawValue)),"message":\(JSONText.quote(error.message))}
            """, nil)
        }
    }

    /// Cancels every item not finished yet, and the previews still being made. Returns the
    /// tickets to leave (outside our lock).
    func cancel() -> [FlightTicket] {
        state.withLock { state in
            state.pendingPreviews = 0
            state.deferred = []
        }
        return cancel(where: { _ in true }, offscreen: false)
    }

    func cancel(where chosen: (Item) -> Bool, offscreen: Bool) -> [FlightTicket] {
        var tickets: [FlightTicket] = []
        var observers: [(FetchJob, UInt64)] = []
        let woken = state.withLock { state -> [EventSubscriber] in
            var woken: [EventSubscriber] = []
            for index in state.items.indices where !state.items[index].isTerminal && chosen(state.items[index]) {
                let item = state.items[index]
                state.deferred.remove(index)  // a yielded item waiting for the screen is cancelled there
                if let ticket = item.ticket { tickets.append(ticket) }
                if let job = item.job, let observer = item.observer { observers.append((job, observer)) }
                state.items[index].detach()
                state.items[index].job = nil
                state.items[index].observer = nil
                state.items[index].state = .cancelled
                state.items[index].cancelledOffscreen = offscreen
                state.cancelled += 1
                woken = log.append("cancelled", """
                    {"index":\(index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url))}
                    """)
            }
            return endIfComplete(&state) ?? woken
        }
        for (job, observer) in observers { job.stopObserving(observer) }
        wake(woken)
        return tickets
    }

    /// `event` gives the event's JSON, and what the journal records instead when it differs.
    private func finish(_ index: Int, as final: ItemState, event: (Item, Int) -> (String, String?)) {
        var observer: (FetchJob, UInt64)?
        var released: [Int] = []
        let woken = state.withLock { state -> [EventSubscriber] in
            guard !state.items[index].isTerminal else { return [] }
            state.items[index].state = final
            state.items[index].detach()
            if final == .done { state.done += 1 } else { state.failed += 1 }
            let item = state.items[index]
            if let job = item.job, let token = item.observer { observer = (job, token) }
            let elapsed = Int((ContinuousClock.now - started) / .milliseconds(1))
            let (json, recorded) = event(item, elapsed)
            let woken = log.append(final == .done ? "done" : "failed", json, recorded: recorded)
            released = state.releasable()
            return endIfComplete(&state) ?? woken
        }
        if let (job, token) = observer { job.stopObserving(token) }
        wake(woken)
        start(released)
    }

    /// Appends `end` once every item is final. Returns the subscribers to wake then (every
    /// subscriber of the log, the same set the event before it returned: wake them once).
    func endIfComplete(_ state: inout State) -> [EventSubscriber]? {
        guard state.finishedAt == nil, state.pendingPreviews == 0, state.items.allSatisfy(\.isTerminal) else { return nil }
        state.finishedAt = .now
        let elapsed = Int((ContinuousClock.now - started) / .milliseconds(1))
        _ = log.append("end", """
            {"total":\(state.items.count),"done":\(state.done),"failed":\(state.failed),"cancelled":\(state.cancelled),"ms":\(elapsed)}
            """)
        return log.finish()
    }

    /// New events for these subscribers: each stream's connection sends them, on its event
    /// loop (the caller writes no socket).
    func wake(_ subscribers: [EventSubscriber]) {
        for subscriber in subscribers { subscriber.wake() }
    }

}
