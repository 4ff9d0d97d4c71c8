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
    private let resizeCount = Atomic<Int>(0)
    private let streamedCount = Atomic<Int>(0)
    private let logger: Logger
    /// Decodes of originals while they download (nil: none, `thumbnails.streams` is 0).
    let streams: StreamedDecode.Slots?

    /// What `format=auto` may answer, most preferred first (`thumbnails.autoFormats`, less
    /// AVIF where this libvips cannot encode it).
    let autoFormats: [ImageFormat]

    init(source: ObjectSource, thumbnailer: Thumbnailer, lane: ResizeLane, autoFormats: [ImageFormat] = ThumbnailConfiguration().autoFormats,
         streams: Int = ThumbnailConfiguration().streams, logger: Logger) {
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
        let joined = flights.join(key: key, priority: priority, waiter: waiter) { ResizeJob(priority: priority) }
        if preview { joined.flight?.wantPreview() }
        if patient { joined.flight?.bePatient() }
        guard let job = joined.job, joined.ready == nil else { return joined }
        // Re-check: a flight may have committed between the caller's lookup and this join.
        if let stored = source.cached(key), stored.isFresh(at: ObjectSource.now()) {
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
        let fetch = source.fetch(destination, priority: priority, stale: original, requestID: requestID) { [self] outcome, _ in
            // On the processing stage already (the fetch's completion runs there).
            job.originalArrived()
            switch outcome {
            case .success(let original):
                derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID, destination: destination)
            case .failure(let error): flights.complete(key: key, job: job, with: .failure(error))
            }
        }
        if fetch.ready == nil, !job.waitOnOriginal(fetch.ticket) { source.leave(fetch.ticket) }
        // Only a batch's item may stream (its focus decides at the first bytes): `/thumb`,
        // which any page can ask, never touches the download's body.
        if fetch.ready == nil, job.isPatient, let slots = streams, let download = fetch.flight {
            let stream = StreamedDecode(
                thumbnailer: thumbnailer, slots: slots,
                timeLimit: lane.configuration.timeLimit, stage: source.stage,
                eligible: { [urgency = job.urgency] in onScreen || urgency.isFocused }, wantsPreview: { [job] in job.wantsPreview }
            ) { [self] header in try plan(variant, of: header) }
            job.stream = stream
            if !stream.tap(download) { job.stream = nil }
        }
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

    /// On the processing stage: the variant of a current `original`. A stale variant made
    /// from these very bytes is renewed with the original's lifetime; otherwise it is
    /// planned here and made in the lane.
    private func derive(from original: CachedObject, _ variant: Variant, key: String, stale: CachedObject?, job: ResizeJob,
                        requestID: String?, destination: DestinationPolicy.Destination) {
        if let stale, original.status == 200, stale.upstreamETag == original.etag {
            var renewed = stale
            renewed.fetchedAt = original.fetchedAt
            renewed.expiresAt = original.expiresAt
            renewed.graceSeconds = original.graceSeconds
            renewed.lastModified = original.lastModified
            renewed.revalidated = true
            flights.complete(key: key, job: job, with: .success(renewed), keep: true)
            source.store.refresh(renewed) { [flights] _ in flights.release(key: key, job: job) }
            return
        }
        guard original.status == 200 else {
            flights.complete(key: key, job: job, with: .failure(.upstreamStatus(original.status)))
            return
        }
        guard !job.isAbandoned else { return }
        // Cost before work: the header (no pixel decoded) and the plan of every step.
        let plan: ThumbnailPlan
        do {
            plan = try self.plan(variant, of: thumbnailer.header(of: original.body))
        } catch {
            job.stream?.stop()
            flights.complete(key: key, job: job, with: .failure(ThumbdError(error)))
            return
        }
        // Decoded while it downloaded, for this very plan: its outcome is the resize's; the
        // lane makes it only when that failed.
        if let stream = job.stream, stream.result(for: plan, { [self] outcome in
            switch outcome {
            case .made(let made, let preview):
                streamedCount.add(1, ordering: .relaxed)
                if let preview, let uri = Previews.dataURI(preview) { job.publishPreview(uri) }
                deliver(made, preview: preview, of: original, key: key, job: job, started: nil)
            case .failed:
                source.stage.submit { [self] in
                    enqueue(original, plan, variant: variant, destination: destination, key: key, stale: stale, job: job,
                            requestID: requestID)
                }
            }
        }) {
            return
        }
        job.stream?.stop()
        enqueue(original, plan, variant: variant, destination: destination, key: key, stale: stale, job: job, requestID: requestID)
    }

    /// Into the lane (or parked, for a batch, when its queue is full).
    private func enqueue(_ original: CachedObject, _ plan: ThumbnailPlan, variant: Variant, destination: DestinationPolicy.Destination,
                         key: String, stale: CachedObject?, job: ResizeJob, requestID: String?) {
        guard !job.isAbandoned else { return }
        let task = lane.submit(cost: plan.estimatedBytes, urgency: job.urgency) { [self] control in
            resize(original, plan, control: control, key: key, job: job, requestID: requestID)
        } dropped: { [flights] error in
            flights.complete(key: key, job: job, with: .failure(error))
        } timedOut: { [flights, limit = lane.configuration.timeLimit] in
            flights.complete(key: key, job: job, with: .failure(ThumbdError(ThumbnailerError.timedOut(limit))))
        }
        guard let task else {
            // A batch's resize waits for room, holding no bytes: it starts over from the
            // store (the original was just stored) when a queued resize leaves the lane.
            if job.isPatient, !lane.isStopped {
                park(Parked(job: job, variant: variant, destination: destination, key: key, stale: stale, requestID: requestID))
                return
            }
            let busy = ThumbdError(.busy, "\(lane.configuration.maxQueued) resizes are already waiting; try again shortly")
            flights.complete(key: key, job: job, with: .failure(busy))
            return
        }
        job.attach(task)
    }

    /// A batch's resize that found the lane's queue full.
    private struct Parked {
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

    private func park(_ entry: Parked) {
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

    /// The plan of `variant`. An AVIF chosen by `format=auto` that would be too large to
    /// encode within bounds becomes WebP (the key stays `auto-avif`, the answer says
    /// `image/webp`, and every browser that takes AVIF takes WebP); an AVIF asked by name is
    /// refused (422 `resize_too_costly`).
    private func plan(_ variant: Variant, of header: ImageHeader) throws(ThumbnailerError) -> ThumbnailPlan {
        var spec = variant.spec(source: header, avif: thumbnailer.canEncodeAVIF)
        do {
            return try thumbnailer.plan(header, spec)
        } catch .tooCostly(let reason) where spec.format == .avif && variant.varyOnAccept {
            spec.format = .webp
            spec.quality = variant.quality ?? Variant.defaultQuality(.webp)
            do { return try thumbnailer.plan(header, spec) } catch { throw .tooCostly(reason) }
        }
    }

    /// In the lane: makes the thumbnail, answers every waiter, then stores the variant. It
    /// inherits the original's freshness: it expires with it; and it records which bytes it
    /// was made from (the original's ETag), so that it can be renewed with them.
    private func resize(_ original: CachedObject, _ plan: ThumbnailPlan, control: ResizeControl, key: String,
                        job: ResizeJob, requestID: String?) {
        let made: Thumbnail
        // A batch's preview comes from this decode, before the encode; it is stored when
        // the variant is (below), under the variant's key.
        let preview = Mutex<Bytes?>(nil)
        let onPreview: ((Thumbnail) -> Void)? = job.wantsPreview ? { tiny in
            guard let uri = Previews.dataURI(tiny.body) else { return }
            preview.withLock { $0 = tiny.body }
            job.publishPreview(uri)
        } : nil
        let resizeStarted = ContinuousClock.now
        do {
            made = try thumbnailer.thumbnail(of: original.body, plan, control: control, preview: onPreview)
        } catch {
            if error == .cancelled {
                // Abandoned (its flight is gone already), or stopped by shutdown (answered so).
                flights.complete(key: key, job: job, with: .failure(.shuttingDown))
                return
            }
            resizeCount.add(1, ordering: .relaxed)
            let refusal = ThumbdError(error)
            if refusal.status >= 500 {
                logger.warning("thumbnail.failed", metadata: [
                    "upstream.url": "\(original.url)", "error": "\(error)", "request.id": "\(requestID ?? "-")",
                ])
            }
            flights.complete(key: key, job: job, with: .failure(refusal))
            return
        }
        guard !control.isCancelled else {
            // Made after its waiters were answered 503 (the watchdog), or stopped by shutdown:
            // dropped, not stored (the store may be closing).
            resizeCount.add(1, ordering: .relaxed)
            return
        }
        deliver(made, preview: preview.withLock { $0 }, of: original, key: key, job: job, started: resizeStarted)
    }

    /// A thumbnail made (in the lane, or while its original downloaded): every waiter is
    /// answered, then it is stored with its preview.
    private func deliver(_ made: Thumbnail, preview: Bytes?, of original: CachedObject, key: String, job: ResizeJob,
                         started: ContinuousClock.Instant?) {
        resizeCount.add(1, ordering: .relaxed)
        if let started { source.metrics.thumbnailMade(duration: ContinuousClock.now - started) }
        let object = CachedObject(
            key: key, url: original.url, status: 200, contentType: made.format.mimeType, body: made.body,
            etag: ObjectSource.etag(of: made.body), upstreamETag: original.etag, lastModified: original.lastModified,
            fetchedAt: original.fetchedAt, expiresAt: original.expiresAt, graceSeconds: original.graceSeconds)
        if let tiny = preview { Previews.store(tiny, of: object, in: source.store) }
        flights.complete(key: key, job: job, with: .success(object), keep: true)
        source.store.insert(object) { [flights] _ in flights.release(key: key, job: job) }
    }
}
