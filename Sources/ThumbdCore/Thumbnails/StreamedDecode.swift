import Foundation
import Support
import Synchronization
import Thumbnailer
import Upstream

/// The JPEG original of an item a page shows on screen, decoded while it downloads, so that
/// its tile is ready soon after the last byte instead of starting then (a screen of large
/// originals arriving together would otherwise pile their decodes up after the downloads).
///
/// Only a batch's focused items stream (`eligible`, asked when the first bytes come, and for
/// an item off screen then, again at each later piece until `waitingMaxBytes` have come: a
/// grid scrolled while its downloads begin has its new screen streamed from the body so far): a
/// batch comes from thumbd's own page, an allowed origin or a local client, never from a
/// foreign page (`RequestGuard`), so this is the user's screen and not anybody's `<img>`.
/// That is why it may run at the daemon's own priority, while the lane, which any page can
/// fill through `/thumb`, runs lowered. The decode computes on its worker's thread
/// (`Thumbnailer.thumbnail(streaming:)`): libvips's shared workers are lowered with the lane,
/// and an unprivileged thread cannot raise a priority back.
///
/// It reads the fetch's body through a `ByteFeed`. Once the first bytes hold the header, it
/// runs the same checks the whole body gets before any decode (the signature, the JPEG
/// header's structure, libvips's header read, and the plan, which refuses what cannot be
/// bounded), then decodes as a lane task on one of the lane's stream workers
/// (`thumbd-stream`, `ResizeLane+Streams.swift`), which waits whenever it has caught up with
/// the download. At most `thumbnails.streams` run at once, each within `streamMaxBytes` of
/// estimated memory and admitted against `thumbnails.maxMemoryBytes` with every resize; one without a slot waits for the next free one,
/// keeping at most `waitingMaxBytes` of the body. One whose whole body came while it waited
/// (a small original, while large ones still downloading hold the slots) is decoded all the
/// same, in one of `Slots.extra` slots beyond the limit (one per core) or first when a slot
/// frees, rather than in the lane, where any page's `/thumb` may queue ahead of it at a
/// lowered priority. A stream that cannot start (off screen, not a JPEG, a header past the
/// first 256 KB, too costly, waited too long) does not, and the resize is made in the lane
/// once the original is whole, as without it.
///
/// Its result is used only for the plan the whole body gives (`result(for:)`, after the
/// body's own checks passed); any failure (a download cut short, a cancel, the time limit
/// after the last byte) falls back to the lane.
final class StreamedDecode: Sendable {
    enum Outcome: Sendable {
        case made(Thumbnail, preview: Bytes?)
        case failed
    }

    private enum Phase {
        /// Off screen at its first bytes: nothing is kept, and the stream starts from the
        /// body so far (`BodyEvent`'s `soFar`) if the item comes on screen while
        /// `waitingMaxBytes` at most have come.
        case dormant
        case waitingForHeader
        case checking
        case waitingForSlot(ThumbnailPlan)
        case decoding(ThumbnailPlan)
        case finished(ThumbnailPlan, Outcome)
        case off
    }

    private struct State {
        var phase = Phase.waitingForHeader
        var begun = false  // bytes have come
        var cameWhileChecking = false  // bytes came while the header was checked
        var observers: [@Sendable (Outcome) -> Void] = []
    }

    /// The estimated memory one stream may hold (its plan's); larger ones are made in the lane.
    static let streamMaxBytes = 8 << 20
    /// The bytes a stream waiting for a slot may keep; past it, it gives up (the lane makes
    /// the thumbnail from the whole body, which the download holds anyway).
    static let waitingMaxBytes = 4 << 20

    let feed = ByteFeed()
    /// What the feed's unread bytes are counted for in the lane's memory while the decode
    /// runs (`ResizeLane.chargeStream`): charged as bytes come, given back when it ends.
    private let feedCharge = Mutex((charged: 0, open: false))
    private let state = Mutex(State())
    /// The decode's control: cancelled when the job is abandoned, or when the decode has not
    /// finished the lane's time limit after the last byte (`ResizeLane.afterTimeLimit`).
    private let control = ResizeControl(timeLimit: .seconds(24 * 3600))
    private let planner: @Sendable (ImageHeader) throws -> ThumbnailPlan
    private let thumbnailer: Thumbnailer
    private let slots: Slots
    /// Where the decode runs: one of its stream workers, within its memory budget.
    private let lane: ResizeLane
    private let wantsPreview: @Sendable () -> Bool
    private let eligible: @Sendable () -> Bool
    private let stage: ProcessingStage

    init(thumbnailer: Thumbnailer, slots: Slots, lane: ResizeLane, stage: ProcessingStage,
         eligible: @escaping @Sendable () -> Bool, wantsPreview: @escaping @Sendable () -> Bool,
         planner: @escaping @Sendable (ImageHeader) throws -> ThumbnailPlan) {
        self.thumbnailer = thumbnailer
        self.eligible = eligible
        self.slots = slots
        self.lane = lane
        self.stage = stage
        self.wantsPreview = wantsPreview
        self.planner = planner
    }

    /// Taps `job`'s body (from the start, whenever it is tapped); false once it has completed.
    func tap(_ job: FetchJob) -> Bool {
        job.observeBody { [self] event in
            switch event {
            case .bytes(let bytes, let soFar):
                switch intake(soFar: soFar.count) {
                case .skip: return
                case .these: feed.append(bytes)
                case .fromTheStart: feed.append(soFar)
                }
                chargeFeed()
                considerStarting()
                if isWaitingForSlot, feed.unread > Self.waitingMaxBytes { stop() }
            case .end(let whole):
                state.withLock { if case .dormant = $0.phase { $0.phase = .off } }
                feed.end(whole: whole)
                if whole {
                    // The tail is decoding now: bounded like any resize.
                    lane.afterTimeLimit { [self] in
                        if isRunning { control.cancel() }
                    }
                } else {
                    stop()
                }
            }
        } != nil
    }

    private enum Intake { case skip, these, fromTheStart }

    /// On the transfer loop, for each piece of the body: whether the feed takes it. At the
    /// first bytes an item off screen goes dormant and the feed keeps nothing; a dormant one
    /// that has come on screen since starts from the body so far.
    private func intake(soFar: Int) -> Intake {
        enum Seen { case dormant, first, taking, done }
        let seen = state.withLock { state -> Seen in
            switch state.phase {
            case .dormant: return .dormant
            case .off, .finished: return .done
            default:
                defer { state.begun = true }
                return state.begun ? .taking : .first
            }
        }
        switch seen {
        case .done: return .skip
        case .taking: return .these
        case .first:
            // The body so far: these bytes alone, unless the tap came after the body began.
            guard soFar <= Self.waitingMaxBytes else {
                state.withLock { $0.phase = .off }
                return .skip
            }
            if eligible() { return .fromTheStart }
            state.withLock { if case .waitingForHeader = $0.phase { $0.phase = .dormant } }
            return .skip
        case .dormant:
            guard soFar <= Self.waitingMaxBytes else {
                state.withLock { if case .dormant = $0.phase { $0.phase = .off } }
                return .skip
            }
            guard eligible() else { return .skip }
            return state.withLock { state -> Intake in
                guard case .dormant = state.phase else { return .skip }
                state.phase = .waitingForHeader
                return .fromTheStart
            }
        }
    }

    /// Nobody waits for the resize any more, or the download failed: the decode stops.
    func stop() {
        let (wasWaiting, observers) = state.withLock { state -> (Bool, [@Sendable (Outcome) -> Void]) in
            switch state.phase {
            case .dormant, .waitingForHeader, .checking, .waitingForSlot:
                state.phase = .off
                defer { state.observers = [] }
                return (true, state.observers)  // a whole body's stream had some (`result(for:)`)
            default:
                return (false, [])
            }
        }
        if !wasWaiting { control.cancel() }
        feed.discard()
        for observer in observers { observer(.failed) }
    }

    private var isWaitingForSlot: Bool { state.withLock { if case .waitingForSlot = $0.phase { true } else { false } } }

    private var isRunning: Bool { state.withLock { if case .decoding = $0.phase { true } else { false } } }

    /// On the transfer loop: once some bytes have come, the header is looked for on the
    /// processing stage (never on the loop).
    private func considerStarting() {
        let check = state.withLock { state -> Bool in
            if case .checking = state.phase { state.cameWhileChecking = true }
            guard case .waitingForHeader = state.phase else { return false }
            state.phase = .checking
            state.cameWhileChecking = false
            return true
        }
        guard check else { return }
        stage.submit { [self] in start() }
    }

    /// On the processing stage: the checks, the plan, a slot, then the decode's thread.
    private func start() {
        let (head, received) = feed.start
        let verdict = Self.plan(head: head, complete: received >= feed.headLimit, thumbnailer: thumbnailer, planner: planner)
        let plan: ThumbnailPlan
        switch verdict {
        case .later:
            // Bytes that came during the check may hold the rest of the header: checked again
            // now, not at the next piece, which a paused origin may not send for a while.
            let again = state.withLock { state -> Bool in
                guard case .checking = state.phase else { return false }
                state.phase = .waitingForHeader
                return state.cameWhileChecking
            }
            if again { considerStarting() }
            return
        case .never:
            state.withLock { $0.phase = .off }
            feed.discard()
            return
        case .plan(let made):
            plan = made
        }
        guard plan.estimatedBytes <= Self.streamMaxBytes else {
            state.withLock { $0.phase = .off }
            feed.discard()
            return
        }
        let waiting = state.withLock { state -> Bool in
            guard case .checking = state.phase else { return false }
            state.phase = .waitingForSlot(plan)
            return true
        }
        guard waiting, slots.take(for: self) else { return }
        if !slotGiven() { slots.give() }
    }

    /// A slot is this stream's: it decodes in it (true), unless it no longer waits for one.
    func slotGiven() -> Bool {
        let plan = state.withLock { state -> ThumbnailPlan? in
            guard case .waitingForSlot(let plan) = state.phase else { return nil }
            state.phase = .decoding(plan)
            return plan
        }
        guard let plan else { return false }
        run(plan)
        return true
    }

    /// On a stream worker of the lane: the decode, which waits whenever it has caught up with the bytes.
    private func run(_ plan: ThumbnailPlan) {
        if feed.isWhole {
            // Its last byte came while it waited: the time limit counts from now.
            lane.afterTimeLimit { [self] in
                if isRunning { control.cancel() }
            }
        }
        let preview = wantsPreview()
        let started = lane.startStream(cost: plan.estimatedBytes) { [self] in
            let tiny = Mutex<Bytes?>(nil)
            let outcome: Outcome
            chargeFeed(opening: true)
            do {
                let made = try thumbnailer.thumbnail(streaming: feed, plan, control: control,
                                                     preview: preview ? { small in tiny.withLock { $0 = small.body } } : nil)
                outcome = .made(made, preview: tiny.withLock { $0 })
            } catch {
                outcome = .failed
            }
            uncharge()
            slots.give()
            let observers = state.withLock { state -> [@Sendable (Outcome) -> Void] in
                state.phase = .finished(plan, outcome)
                defer { state.observers = [] }
                return state.observers
            }
            for observer in observers { observer(outcome) }
        }
        guard !started else { return }
        // No room in the lane's budget (or the lane has stopped): the lane makes it from the
        // whole body, as for a stream that never started.
        slots.give()
        let observers = state.withLock { state -> [@Sendable (Outcome) -> Void] in
            state.phase = .off
            defer { state.observers = [] }
            return state.observers
        }
        feed.discard()
        for observer in observers { observer(.failed) }
    }

    /// Counts the feed's unread bytes in the lane's memory while the decode runs (from
    /// `opening` on); on the transfer loop as bytes come, and once on the worker at its start.
    private func chargeFeed(opening: Bool = false) {
        let delta = feedCharge.withLock { charge -> Int in
            if opening { charge.open = true }
            guard charge.open else { return 0 }
            let held = feed.unread
            defer { charge.charged = held }
            return held - charge.charged
        }
        lane.chargeStream(delta)  // the changes add up in any order
    }

    /// The decode has ended: what its feed was charged goes back to the lane.
    private func uncharge() {
        let charged = feedCharge.withLock { charge -> Int in
            charge.open = false
            defer { charge.charged = 0 }
            return charge.charged
        }
        lane.chargeStream(-charged)
    }

    /// The decode's outcome for `plan` (the whole body's), to `observer` once it is known;
    /// false when no stream runs for that plan (the lane makes it).
    func result(for plan: ThumbnailPlan, _ observer: @escaping @Sendable (Outcome) -> Void) -> Bool {
        var waits = false
        let finished = state.withLock { state -> Outcome?? in
            switch state.phase {
            case .decoding(let running) where running == plan:
                state.observers.append(observer)
                return .some(nil)
            case .waitingForSlot(let waiting) where waiting == plan && feed.isWhole:
                // The whole body came before a slot: decoded here all the same, at once in
                // a slot beyond the limit if one is free, else first when one frees.
                state.observers.append(observer)
                waits = true
                return .some(nil)
            case .finished(let ran, let outcome) where ran == plan:
                return .some(outcome)
            case .dormant, .waitingForHeader, .checking, .waitingForSlot:
                state.phase = .off  // the lane makes it; a slot given later is passed on
                return nil
            default:
                return nil
            }
        }
        guard let finished else { return false }
        if let outcome = finished { observer(outcome) }
        if waits, slots.takeExtra(for: self), !slotGiven() { slots.give() }
        return true
    }
}
