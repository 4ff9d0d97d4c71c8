import BlobStore
import Crypto
import Foundation
import Logging
import Support
import Thumbnailer
import Upstream

/// Where a cached object comes from: the store, or one upstream fetch per key however many
/// ask. On completion the waiters are answered at once; the flight stays in the coalescer,
/// answering newcomers, until the store has committed, so a request arriving in between
/// never starts a second fetch and no client waits for SQLite.
final class ObjectSource: Sendable {
    let store: CacheStore
    let coalescer: FetchCoalescer
    let loop: TransferLoops
    let stage: ProcessingStage
    let thumbnailer: Thumbnailer
    let counters: CacheCounters
    let metrics: DaemonMetrics
    private let configuration: ThumbdConfiguration
    private let logger: Logger
    private let failureLog = RateLimitedLog(linesPerWindow: 10, window: .seconds(10))
    private let lookupFailureLog = RateLimitedLog(linesPerWindow: 1, window: .seconds(10))

    init(store: CacheStore, coalescer: FetchCoalescer, loop: TransferLoops, stage: ProcessingStage,
         thumbnailer: Thumbnailer, configuration: ThumbdConfiguration, metrics: DaemonMetrics, logger: Logger) {
        self.metrics = metrics
        self.counters = CacheCounters(metrics: metrics)
        self.stage = stage
        self.thumbnailer = thumbnailer
        self.store = store
        self.coalescer = coalescer
        self.loop = loop
        self.configuration = configuration
        self.logger = logger
    }

    /// A stored object, fresh or not; nil when absent or unreadable (then we fetch).
    /// `accessedAt` (Unix milliseconds): it counts as used then, for the LRU order.
    func cached(_ key: String, accessedAt milliseconds: Int64? = nil) -> CachedObject? {
        do {
            return try store.lookup(key, accessedAt: milliseconds)
        } catch {
            // Every request looks up: a file that fails every read would write a line per
            // request, and the log would drown what else it says.
            lookupFailureLog.run { suppressed in
                logger.error("store.lookup failed", metadata: [
                    "error": "\(error)", "cache.key": "\(key)", "log.suppressed": "\(suppressed)",
                ])
            }
            return nil
        }
    }

    /// Joins (or starts) the fetch of `destination`; `waiter` gets the outcome exactly once
    /// unless the ticket leaves first. With the `stale` stored copy the fetch is
    /// conditional: a `304` renews that copy instead of downloading it again. `beforeStart`
    /// gets the job this call starts, before its transfer is submitted (nothing of its body
    /// has come yet).
    func fetch(_ destination: DestinationPolicy.Destination, priority: Priority, stale: CachedObject? = nil,
               requestID: String? = nil, beforeStart: ((FetchJob) -> Void)? = nil,
               waiter: @escaping FetchCoalescer.Waiter) -> FetchCoalescer.Joined {
        let key = destination.url
        let stale = stale?.status == 200 ? stale : nil
        let joined = coalescer.join(key: key, priority: priority, now: Self.now(), waiter: waiter) {
            let validators = stale.map { Validators(etag: $0.upstreamETag, lastModified: $0.lastModified) }
            let started = ContinuousClock.now
            return FetchJob(url: destination.url, host: destination.host, priority: priority, validators: validators) {
                [self] job, result in
                // Called on the transfer loop, which only hands the bytes over.
                stage.submit { [self] in
                    finish(job, key: key, url: destination.url, stale: stale, result: result, started: started,
                           requestID: requestID)
                }
            }
        }
        guard let job = joined.job, joined.ready == nil else { return joined }
        // The flight's leader checks once more: one may have committed between the lookup and the join.
        if let object = fresh(key) {
            coalescer.complete(key: key, job: job, with: object.status == 200 ? .success(object) : .failure(.upstreamStatus(object.status)))
        } else {
            beforeStart?(job)
            if !loop.submit(job) {
                coalescer.complete(key: key, job: job, with: .failure(ThumbdError(UpstreamError.queueFull)))
            }
        }
        return joined
    }

    /// The stored object of `key` while it is fresh: what every step after the lookup's own
    /// decision asks (a flight's leader after its join, a variant of its original, a preview).
    func fresh(_ key: String) -> CachedObject? {
        guard let object = cached(key), object.isFresh(at: Self.now()) else { return nil }
        return object
    }

    /// A waiter is gone; abort the transfer if it was the last one (and that is configured).
    func leave(_ ticket: FetchCoalescer.Ticket) {
        if let job = coalescer.leave(ticket) { loop.cancel(job) }
    }

    /// Seconds `object` may still be answered after it expired, while it is refreshed.
    func grace(of object: CachedObject) -> Int {
        Freshness.grace(of: object.graceSeconds, configured: configuration.store.graceSeconds)
    }

    /// Whether an expired `object` may be answered at once (then `refreshInBackground`):
    /// an image, within its grace.
    func servableStale(_ object: CachedObject, at now: Int64) -> Bool {
        object.status == 200 && now < object.expiresAt + Int64(grace(of: object))
    }

    /// Starts (or joins) the one refresh of an expired object that is being answered stale;
    /// nobody waits for it, and it is never abandoned.
    func refreshInBackground(_ destination: DestinationPolicy.Destination, stale: CachedObject, requestID: String? = nil) {
        _ = fetch(destination, priority: .normal, stale: stale, requestID: requestID) { _, _ in }
    }

    /// On the processing stage: checks the bytes, makes the object, answers the waiters, then
    /// submits the store write.
    private func finish(_ job: FetchJob, key: String, url: String, stale: CachedObject?,
                        result: Result<UpstreamResponse, UpstreamError>, started: ContinuousClock.Instant,
                        requestID: String?) {
        let now = Self.now()
        metrics.fetched(result, duration: ContinuousClock.now - started)
        if case .success(let response) = result, response.status == 304, let stale {
            revalidated(stale, by: response, job: job, key: key, now: now)
            return
        }
        // Judged by the bytes, not the origin's header (415).
        let checked = result.mapError(ThumbdError.init).flatMap { response -> Result<(UpstreamResponse, String), ThumbdError> in
            // The first bytes decide (and a copy of 64 is cheaper than of the whole body).
            let head = response.body.withUnsafeBytes { Array($0.prefix(64)) }
            guard let (format, type) = ImageSniffer.sniff(head), Thumbnailer.canDecode(format) else {
                return .failure(.notAnImage)
            }
            // Then the header: a known signature followed by garbage is not an image. A JPEG,
            // PNG or simple WebP whose header reads cleanly passes here; any other body is
            // read by the loader of its sniffed format, and no other.
            let clean = response.body.withUnsafeBytes { ImageHeaderCheck.dimensions(of: $0, contentType: type) } != nil
            guard clean || (try? thumbnailer.header(of: response.body, format: format)) != nil else {
                return .failure(.notAnImage)
            }
            return .success((response, type))
        }
        switch checked {
        case .success(let (response, contentType)):
            let freshness = Freshness.of(
                cacheControl: response.cacheControl, expires: response.expires, date: response.date,
                now: Date(timeIntervalSince1970: TimeInterval(now)),
                defaultTTL: configuration.store.defaultTTLSeconds, maxTTL: configuration.store.maxTTLSeconds)
            let object = CachedObject(
                key: key, url: url, status: 200, contentType: contentType, body: response.body,
                etag: Self.etag(of: response.body, at: key, origin: response.etag), upstreamETag: response.etag, lastModified: response.lastModified,
                fetchedAt: now, expiresAt: now + Int64(freshness.ttlSeconds), graceSeconds: freshness.graceSeconds)
            guard freshness.storable else {
                coalescer.complete(key: key, job: job, with: .success(object))
                return
            }
            // Answer first, keeping the flight; `release` must come after `complete`, which
            // is why the insert (whose completion releases) is submitted second.
            coalescer.complete(key: key, job: job, with: .success(object), keep: true)
            store.insert(object) { [coalescer] _ in
                // A failed insert is logged by the store; the next asker fetches again.
                coalescer.release(key: key, job: job)
            }
        case .failure(let error) where error.status == 404 || error.status == 410:
            let negative = CachedObject(
                key: key, url: url, status: error.status, contentType: "application/json", body: .empty,
                etag: "\"\(error.status)\"", fetchedAt: now,
                expiresAt: now + Int64(configuration.store.negativeTTLSeconds))
            coalescer.complete(key: key, job: job, with: .failure(error), keep: true)
            store.insert(negative) { [coalescer] _ in coalescer.release(key: key, job: job) }
        case .failure(let error):
            // Any page can make thumbd fetch what fails: every failure is counted by code
            // (thumbd_upstream_errors_total); an origin's failure (5xx) is also logged, at a
            // bounded rate, and a client's mistake (a refused or missing destination) only
            // at debug level.
            if error.status >= 500 {
                failureLog.run { suppressed in
                    logger.info("fetch.failed", metadata: [
                        "upstream.url": "\(url)", "error": "\(error)", "log.suppressed": "\(suppressed)",
                        "request.id": "\(requestID ?? "-")",
                    ])
                }
            } else if error != .cancelled {
                logger.debug("fetch.refused", metadata: ["upstream.url": "\(url)", "error": "\(error)", "request.id": "\(requestID ?? "-")"])
            }
            coalescer.complete(key: key, job: job, with: .failure(error))
        }
    }

    /// A `304`: the stored copy is current. Its lifetime is renewed from the headers the
    /// origin sent with the 304 (or kept as it was when they say nothing about it), its
    /// validators updated, and the body — not downloaded again — left as it is.
    private func revalidated(_ stale: CachedObject, by response: UpstreamResponse, job: FetchJob, key: String, now: Int64) {
        var object = stale
        if Freshness.isExplicit(cacheControl: response.cacheControl, expires: response.expires) {
            let freshness = Freshness.of(
                cacheControl: response.cacheControl, expires: response.expires, date: response.date,
                now: Date(timeIntervalSince1970: TimeInterval(now)),
                defaultTTL: configuration.store.defaultTTLSeconds, maxTTL: configuration.store.maxTTLSeconds)
            object.expiresAt = now + Int64(freshness.ttlSeconds)
            object.graceSeconds = freshness.graceSeconds
        } else {
            object.expiresAt = now + max(0, stale.expiresAt - stale.fetchedAt)
        }
        object.fetchedAt = now
        object.revalidated = true
        if let etag = response.etag { object.upstreamETag = etag }
        if let lastModified = response.lastModified { object.lastModified = lastModified }
        coalescer.complete(key: key, job: job, with: .success(object), keep: true)
        store.refresh(object) { [coalescer] _ in coalescer.release(key: key, job: job) }
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// An original's strong validator. With the origin's own strong ETag, 128 bits of the
    /// SHA-256 of the key, that ETag and the body's length: the origin promises that its
    /// strong ETag names these very bytes (Varnish and nginx pass it on as theirs), and
    /// hashing a few dozen bytes spares the body's hash: for a 2.7 MB original 1.3 ms of CPU
    /// where the CPU has SHA instructions and 3.6 ms where it has not (3% and 8% of its
    /// thumbnail), on the path of its first answer. The key keeps two URLs that share an
    /// ETag apart, the length two bodies an origin gave one ETag by mistake. Without one (or
    /// with a weak one), the body's own hash.
    static func etag(of body: Bytes, at key: String, origin: String?) -> String {
        guard let origin, origin.utf8.count >= 2, origin.utf8.first == UInt8(ascii: "\""),
              origin.utf8.last == UInt8(ascii: "\"")
        else { return etag(of: body) }
        return quoted(SHA256.hash(data: Array("\(key)\n\(origin)\n\(body.count)".utf8)))
    }

    /// A strong validator: 128 bits of the body's SHA-256.
    static func etag(of body: Bytes) -> String {
        quoted(body.withUnsafeBytes { SHA256.hash(data: $0) })
    }

    /// 128 bits of `digest` as a quoted entity-tag.
    private static func quoted(_ digest: SHA256.Digest) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = [UInt8(ascii: "\"")]
        for byte in digest.prefix(16) {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        text.append(UInt8(ascii: "\""))
        return String(decoding: text, as: UTF8.self)
    }
}
