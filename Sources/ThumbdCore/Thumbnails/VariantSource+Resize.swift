import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// The making of a variant once its original is here (on the processing stage, then in the
/// lane): the header and the plan, which refuse what cannot be bounded, the resize, and the
/// answer to the flight's waiters. The flight itself, and how the original is had, are in
/// VariantSource.swift.
extension VariantSource {
    /// On the processing stage: the variant of a current `original`. A stale variant made
    /// from these very bytes is renewed with the original's lifetime; otherwise it is
    /// planned here and made in the lane.
    func derive(from original: CachedObject, _ variant: Variant, key: String, stale: CachedObject?, job: ResizeJob,
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
    func enqueue(_ original: CachedObject, _ plan: ThumbnailPlan, variant: Variant, destination: DestinationPolicy.Destination,
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

    /// The plan of `variant`. An AVIF chosen by `format=auto` that would be too large to
    /// encode within bounds becomes WebP (the key stays `auto-avif`, the answer says
    /// `image/webp`, and every browser that takes AVIF takes WebP); an AVIF asked by name is
    /// refused (422 `resize_too_costly`).
    func plan(_ variant: Variant, of header: ImageHeader) throws(ThumbnailerError) -> ThumbnailPlan {
        var spec = variant.spec(source: header, avif: thumbnailer.canEncodeAVIF,
                                animates: thumbnailer.configuration.limits.animates(header))
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
