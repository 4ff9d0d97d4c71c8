import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// Where a variant comes from once the lookup missed: one resize flight per variant key,
/// however many ask. The original is taken from the store when fresh, else fetched through
/// `ObjectSource` (coalesced with every other asker of that original). The cheap part (the
/// header read and the plan, which refuses what cannot be bounded) runs on the processing
/// stage; the resize itself runs in the `ResizeLane`.
final class VariantSource: Sendable {
    let source: ObjectSource
    let thumbnailer: Thumbnailer
    let lane: ResizeLane
    let flights = Coalescer<ResizeJob>(abortWhenAbandoned: true)
    let resizeCount = Atomic<Int>(0)
    let streamedCount = Atomic<Int>(0)
    let logger: Logger
    /// Decodes of originals while they download (nil: none, `thumbnails.streams` is 0).
    let streams: StreamedDecode.Slots?

    /// What `format=auto` may answer, most preferred first (`thumbnails.autoFormats`, less
    /// AVIF where this libvips cannot encode it).
    let autoFormats: [ImageFormat]
    /// What `preset=NAME` may name (`thumbnails.presets`, `thumbnails.onlyPresets`).
    let presets: Presets

    init(source: ObjectSource, thumbnailer: Thumbnailer, lane: ResizeLane, autoFormats: [ImageFormat] = ThumbnailConfiguration().autoFormats,
         presets: Presets = Presets(), streams: Int = ThumbnailConfiguration().streams, logger: Logger) {
        self.presets = presets
        self.streams = streams > 0 ? StreamedDecode.Slots(limit: streams) : nil
        self.autoFormats = autoFormats.filter { $0 != .avif || thumbnailer.canEncodeAVIF }
        self.source = source
        defer { lane.onRoom { [weak self] in self?.unpark() } }
        self.thumbnailer = thumbnailer
        self.lane = lane
        self.logger = logger
    }

    /// Thumbnails made since start.
    var resizes: Int { resizeCount.load(ordering: .relaxed) }

    /// Of those, the ones decoded while their original downloaded.
    var streamed: Int { streamedCount.load(ordering: .relaxed) }

    /// Joins (or starts) the making of `variant` of `destination`. With the `stale` stored
    /// variant, an original that turns out unchanged (revalidated, or the same bytes)
    /// renews that variant instead of resizing again. `onScreen`: a batch shows it now, so
    /// its original may be decoded while it downloads (as may one the batch's focus reaches
    /// before its first bytes come).
    func make(_ variant: Variant, of destination: DestinationPolicy.Destination, priority: Priority,
              stale: CachedObject? = nil, requestID: String? = nil, preview: Bool = false, patient: Bool = false,
              onScreen: Bool = false, waiter: @escaping Coalescer<ResizeJob>.Waiter) -> Coalescer<ResizeJob>.Joined {
        let key = variant.key(of: destination.url)
        let joined = flights.join(key: key, priority: priority, now: ObjectSource.now(), waiter: waiter) { ResizeJob(priority: priority) }
        if preview { joined.flight?.wantPreview() }
        if patient { joined.flight?.bePatient() }
        guard let job = joined.job, joined.ready == nil else { return joined }
        // Re-check: a flight may have committed between the caller's lookup and this join.
        if let stored = source.fresh(key) {
            flights.complete(key: key, job: job, with: .success(stored))
            return joined
        }
        begin(job, variant, of: destination, key: key, priority: priority, stale: stale, requestID: requestID, onScreen: onScreen)
        return joined
    }

    /// The original, from the store when fresh, else fetched; then `derive`.
    private func begin(_ job: ResizeJob, _ variant: Variant, of destination: DestinationPolicy.Destination, key: String,
                       priority: Priority, stale: CachedObject?, requestID: String?, onScreen: Bool = false) {
        let original = source.cached(destination.url)
        if let original, original.isFresh(at: ObjectSource.now()) {
            source.stage.submit { [self] in
                derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID,
                       destination: destination)
            }
            return
        }
        // The original is fetched (conditionally, when a stale copy of it is stored).
        // Only a batch's item may stream (its focus decides at the first bytes): `/thumb`,
        // which any page can ask, never touches the download's body. A download this item
        // starts is tapped before it is submitted: tapped after, its first bytes could come
        // first, and an origin that then pauses (or a last piece) would leave the stream
        // waiting for bytes that had come.
        let tap: @Sendable (FetchJob) -> Void = { [self] download in
            guard job.isPatient, let slots = streams, job.stream == nil else { return }
            let stream = StreamedDecode(
                thumbnailer: thumbnailer, slots: slots,
                lane: lane, stage: source.stage,
                eligible: { [urgency = job.urgency] in onScreen || urgency.isFocused }, wantsPreview: { [job] in job.wantsPreview }
            ) { [self] header in try plan(variant, of: header) }
            job.stream = stream
            if !stream.tap(download) { job.stream = nil }
        }
        let fetch = source.fetch(destination, priority: priority, stale: original, requestID: requestID,
                                 beforeStart: tap) { [self] outcome, _ in
            // On the processing stage already (the fetch's completion runs there).
            job.originalArrived()
            switch outcome {
            case .success(let original):
                derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID, destination: destination)
            case .failure(let error): flights.complete(key: key, job: job, with: .failure(error))
            }
        }
        if fetch.ready == nil, !job.waitOnOriginal(fetch.ticket) { source.leave(fetch.ticket) }
        // A download already running (another's, joined) is tapped now: it reads from the
        // body so far at its next piece.
        if fetch.ready == nil, fetch.role != .leader, let download = fetch.flight { tap(download) }
        if let ready = fetch.ready {
            source.stage.submit { [self] in
                switch ready {
                case .success(let original):
                    derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID, destination: destination)
                case .failure(let error): flights.complete(key: key, job: job, with: .failure(error))
                }
            }
        }
    }

    /// A waiter is gone; the last one abandons the resize.
    func leave(_ ticket: Coalescer<ResizeJob>.Ticket) {
        if let original = flights.leave(ticket)?.abandon() { source.leave(original) }
    }

    /// A batch's resize that found the lane's queue full.
    struct Parked {
        let job: ResizeJob
        let variant: Variant
        let destination: DestinationPolicy.Destination
        let key: String
        let stale: CachedObject?
        let requestID: String?
    }

    private let parked = Mutex<[Parked]>([])

    /// Resizes waiting for room in the lane (batches' only).
    var parkedCount: Int { parked.withLock { $0.count } }

    func park(_ entry: Parked) {
        parked.withLock { $0.append(entry) }
        unpark()  // room may have opened meanwhile
    }

    /// When the lane has room: the most urgent parked resize (focused first, then by
    /// priority, then the oldest) starts over; abandoned ones are dropped. One per call: it
    /// reaches the lane later (through the store and the processing stage), and each resize
    /// that leaves the lane calls again.
    private func unpark() {
        if lane.hasRoom, let entry = parked.withLock({ parked -> Parked? in
            parked.removeAll { $0.job.isAbandoned }
            guard !parked.isEmpty else { return nil }
            var best = 0
            var bestRank = parked[0].job.urgency.rank
            for index in parked.indices.dropFirst() {
                let rank = parked[index].job.urgency.rank
                if rank > bestRank { (best, bestRank) = (index, rank) }
            }
            return parked.remove(at: best)
        }) {
            begin(entry.job, entry.variant, of: entry.destination, key: entry.key, priority: entry.job.urgency.priority,
                  stale: entry.stale, requestID: entry.requestID)
        }
    }

    /// Shutdown, after the lane stopped: the parked resizes are answered `shutting_down`.
    func stop() {
        for entry in parked.withLock({ parked in defer { parked = [] }; return parked }) {
            flights.complete(key: entry.key, job: entry.job, with: .failure(.shuttingDown))
        }
    }
}
