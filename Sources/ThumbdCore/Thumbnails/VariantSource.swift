import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// What a resize flight runs. Resizes are not aborted when their waiters leave (the result
/// is stored for the next asker), so its priority only documents intent.
final class ResizeJob: CoalescedJob {
    func raisePriority(to priority: Priority) {}
}

/// Where a variant comes from: the store, or one resize per variant key however many ask.
/// The original is taken from the store when fresh, else fetched through `ObjectSource`
/// (coalesced with every other asker of that original); the resize runs on the processing
/// stage, and its waiters are coalesced like the waiters of a fetch.
final class VariantSource: Sendable {
    let source: ObjectSource
    let thumbnailer: Thumbnailer
    let flights = Coalescer<ResizeJob>(abortWhenAbandoned: false)
    private let resizeCount = Atomic<Int>(0)
    private let logger: Logger

    init(source: ObjectSource, thumbnailer: Thumbnailer, logger: Logger) {
        self.source = source
        self.thumbnailer = thumbnailer
        self.logger = logger
    }

    /// Thumbnails made since start.
    var resizes: Int { resizeCount.load(ordering: .relaxed) }

    /// Joins (or starts) the making of `variant` of `destination`. With the `stale` stored
    /// variant, an original that turns out unchanged (revalidated, or the same bytes)
    /// renews that variant instead of resizing again.
    func make(_ variant: Variant, of destination: DestinationPolicy.Destination, priority: Priority,
              stale: CachedObject? = nil, requestID: String? = nil,
              waiter: @escaping Coalescer<ResizeJob>.Waiter) -> Coalescer<ResizeJob>.Joined {
        let key = variant.key(of: destination.url)
        let joined = flights.join(key: key, priority: priority, waiter: waiter) { ResizeJob() }
        guard let job = joined.job, joined.ready == nil else { return joined }
        // Re-check: a flight may have committed between the caller's lookup and this join.
        if let stored = source.cached(key), stored.isFresh(at: ObjectSource.now()) {
            flights.complete(key: key, job: job, with: .success(stored))
            return joined
        }
        let original = source.cached(destination.url)
        if let original, original.isFresh(at: ObjectSource.now()) {
            source.stage.submit { [self] in derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID) }
            return joined
        }
        // The original is fetched (conditionally, when a stale copy of it is stored).
        let fetch = source.fetch(destination, priority: priority, stale: original, requestID: requestID) { [self] outcome, _ in
            // On the processing stage already (the fetch's completion runs there).
            switch outcome {
            case .success(let original): derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID)
            case .failure(let error): flights.complete(key: key, job: job, with: .failure(error))
            }
        }
        if let ready = fetch.ready {
            source.stage.submit { [self] in
                switch ready {
                case .success(let original): derive(from: original, variant, key: key, stale: stale, job: job, requestID: requestID)
                case .failure(let error): flights.complete(key: key, job: job, with: .failure(error))
                }
            }
        }
        return joined
    }

    /// On the processing stage: the variant of a current `original`. A stale variant made
    /// from these very bytes is renewed with the original's lifetime; otherwise it is made.
    private func derive(from original: CachedObject, _ variant: Variant, key: String, stale: CachedObject?, job: ResizeJob,
                        requestID: String?) {
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
        resize(original, into: variant, key: key, job: job, requestID: requestID)
    }

    /// On the processing stage: resizes, answers every waiter, then stores the variant. It
    /// inherits the original's freshness: it expires with it; and it records which bytes it
    /// was made from (the original's ETag), so that it can be renewed with them.
    private func resize(_ original: CachedObject, into variant: Variant, key: String, job: ResizeJob, requestID: String?) {
        guard original.status == 200 else {
            flights.complete(key: key, job: job, with: .failure(.upstreamStatus(original.status)))
            return
        }
        let made: Thumbnail
        do {
            let header = try thumbnailer.header(of: original.body)
            made = try thumbnailer.thumbnail(of: original.body, header: header,
                                             variant.spec(source: header, avif: thumbnailer.canEncodeAVIF))
        } catch {
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
        resizeCount.add(1, ordering: .relaxed)
        source.metrics.thumbnailMade()
        let object = CachedObject(
            key: key, url: original.url, status: 200, contentType: made.format.mimeType, body: made.body,
            etag: ObjectSource.etag(of: made.body), upstreamETag: original.etag, lastModified: original.lastModified,
            fetchedAt: original.fetchedAt, expiresAt: original.expiresAt, graceSeconds: original.graceSeconds)
        flights.complete(key: key, job: job, with: .success(object), keep: true)
        source.store.insert(object) { [flights] _ in flights.release(key: key, job: job) }
    }
}
