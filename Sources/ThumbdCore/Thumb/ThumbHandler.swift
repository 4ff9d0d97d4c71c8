import BlobStore
import Foundation
import HTTPServer
import Upstream

/// `GET|HEAD /thumb?url=…`: parse → destination policy → cache lookup → (miss) join or
/// start the one fetch for this key → answer every waiter from its outcome.
struct ThumbHandler: Sendable {
    let source: ObjectSource
    let variants: VariantSource
    let policy: DestinationPolicy
    let signer: URLSigner

    func handle(_ request: Request, context: RequestContext, requestID: String? = nil) -> HandlerResult {
        let placeholder: Bool
        do {
            placeholder = try ThumbRequest.wantsPlaceholder(request)
        } catch {
            return .response(.error(error))
        }
        if signer.isEnabled, !signer.verify(request.query["sig"], { request.query[$0] }) {
            return .response(Self.failure(ThumbdError(.badSignature, "sig is missing or wrong for this url and these parameters"),
                                          cache: nil, placeholder: placeholder))
        }
        let thumb: ThumbRequest
        do {
            thumb = try ThumbRequest(request, policy: policy, avif: variants.thumbnailer.canEncodeAVIF)
        } catch {
            return .response(Self.failure(error, cache: nil, placeholder: placeholder))
        }
        if let variant = thumb.variant {
            return handle(variant, of: thumb, placeholder: placeholder, requestID: requestID, context: context)
        }
        let key = thumb.destination.url
        let stored = source.cached(key)
        let now = ObjectSource.now()
        if let stored, stored.isFresh(at: now) {
            source.store.recordAccess(key)
            source.counters.count(.hit)
            if stored.status == 200 {
                return .response(Self.image(stored, cache: "hit", ifNoneMatch: thumb.ifNoneMatch, now: now))
            }
            return .response(Self.failure(
                .upstreamStatus(stored.status), cache: "hit", placeholder: placeholder,
                maxAge: stored.remainingSeconds(at: now)))
        }
        let stale = stored?.status == 200 ? stored : nil
        if let stale, source.servableStale(stale, at: now) {
            // Expired, within its grace: answered at once while one refresh runs behind it.
            source.store.recordAccess(key)
            source.refreshInBackground(thumb.destination, stale: stale, requestID: requestID)
            return .response(Self.staleAnswer(stale, ifNoneMatch: thumb.ifNoneMatch, counters: source.counters, now: now))
        }
        let joined = source.fetch(thumb.destination, priority: thumb.priority, stale: stale,
                                  requestID: requestID) { [ifNoneMatch = thumb.ifNoneMatch, counters = source.counters] outcome, role in
            context.respond(Self.answer(outcome, role: role, stale: stale, ifNoneMatch: ifNoneMatch, placeholder: placeholder,
                                        counters: counters))
        }
        if let ready = joined.ready {  // finished a moment ago, still being stored: a hit
            return .response(Self.answer(ready, role: .finished, stale: stale, ifNoneMatch: thumb.ifNoneMatch,
                                         placeholder: placeholder, counters: source.counters))
        }
        context.onClientGone { [source] in source.leave(joined.ticket) }
        return .suspend
    }

    /// A thumbnail: the stored variant, or one resize however many ask (its original
    /// fetched once, or taken from the cache without touching the network).
    private func handle(_ variant: Variant, of thumb: ThumbRequest, placeholder: Bool, requestID: String?,
                        context: RequestContext) -> HandlerResult {
        let key = variant.key(of: thumb.destination.url)
        let vary = variant.varyOnAccept
        let stored = source.cached(key)
        let now = ObjectSource.now()
        if let stored, stored.isFresh(at: now) {
            source.store.recordAccess(key)
            source.counters.count(.hit)
            return .response(Self.image(stored, cache: "hit", ifNoneMatch: thumb.ifNoneMatch, now: now, vary: vary))
        }
        let stale = stored?.status == 200 ? stored : nil
        if let stale, source.servableStale(stale, at: now) {
            source.store.recordAccess(key)
            _ = variants.make(variant, of: thumb.destination, priority: .normal, stale: stale, requestID: requestID) { _, _ in }
            return .response(Self.staleAnswer(stale, ifNoneMatch: thumb.ifNoneMatch, counters: source.counters, now: now, vary: vary))
        }
        let joined = variants.make(variant, of: thumb.destination, priority: thumb.priority, stale: stale, requestID: requestID) {
            [ifNoneMatch = thumb.ifNoneMatch, counters = source.counters] outcome, role in
            context.respond(Self.answer(outcome, role: role, stale: stale, ifNoneMatch: ifNoneMatch, placeholder: placeholder,
                                        counters: counters, vary: vary))
        }
        if let ready = joined.ready {
            return .response(Self.answer(ready, role: .finished, stale: stale, ifNoneMatch: thumb.ifNoneMatch,
                                         placeholder: placeholder, counters: source.counters, vary: vary))
        }
        context.onClientGone { [variants] in _ = variants.flights.leave(joined.ticket) }
        return .suspend
    }

    /// The response for one waiter, from the outcome every waiter of the flight shares.
    private static func answer(_ outcome: FlightOutcome, role: FlightRole, stale: CachedObject?,
                               ifNoneMatch: String?, placeholder: Bool, counters: CacheCounters, vary: Bool = false) -> Response {
        let now = ObjectSource.now()
        switch outcome {
        case .success(let object):
            let result = CacheResult.of(role, object)
            counters.count(result)
            return image(object, cache: result.rawValue, ifNoneMatch: ifNoneMatch, now: now, vary: vary)
        case .failure(let error):
            // Upstream is failing but we still hold the old copy: stale beats an error
            // (not for 404/410, where the origin told us the image is gone, and not when
            // the origin said must-revalidate).
            if let stale, error.status >= 500, stale.graceSeconds != Freshness.mustRevalidate {
                return staleAnswer(stale, ifNoneMatch: ifNoneMatch, counters: counters, now: now, vary: vary)
            }
            let maxAge: Int64? = (error.status == 404 || error.status == 410) ? 0 : nil
            return failure(error, cache: CacheResult.of(role, nil).rawValue, placeholder: placeholder, maxAge: maxAge)
        }
    }

    /// An expired copy, said to be one (`X-Thumbd-Cache: stale`, `max-age=0`, a `Warning`).
    private static func staleAnswer(_ stale: CachedObject, ifNoneMatch: String?, counters: CacheCounters, now: Int64,
                                    vary: Bool = false) -> Response {
        counters.count(.stale)
        var response = image(stale, cache: "stale", ifNoneMatch: ifNoneMatch, now: now, vary: vary)
        response.headers.append(("Warning", "110 thumbd \"Response is Stale\""))
        return response
    }

    static func image(_ object: CachedObject, cache: String, ifNoneMatch: String?, now: Int64, vary: Bool = false) -> Response {
        var headers: [(String, String)] = [
            ("ETag", object.etag),
            ("Cache-Control", "public, max-age=\(object.remainingSeconds(at: now))"),
            ("X-Thumbd-Cache", cache),
        ]
        // format=auto: the answer depends on Accept, and caches in front must know it.
        if vary { headers.append(("Vary", "Accept")) }
        // Bounded again here for objects stored before origin headers were validated.
        if let lastModified = object.lastModified, lastModified.utf8.count <= OriginHeaders.maxDateBytes {
            headers.append(("Last-Modified", lastModified))
        }
        if let ifNoneMatch, ETagMatch.matches(ifNoneMatch, object.etag) {
            return Response(status: 304, headers: headers)
        }
        headers.append(("Content-Type", object.contentType))
        headers.append(("X-Content-Type-Options", "nosniff"))
        return Response(status: 200, headers: headers, body: object.body)
    }

    static func failure(_ error: ThumbdError, cache: String?, placeholder: Bool, maxAge: Int64? = nil) -> Response {
        var headers: [(String, String)] = []
        if let cache { headers.append(("X-Thumbd-Cache", cache)) }
        headers.append(("Cache-Control", maxAge.map { "public, max-age=\($0)" } ?? "no-store"))
        if placeholder {
            headers.append(("Content-Type", Placeholder.contentType))
            headers.append(("X-Thumbd-Error", error.code.rawValue))
            return Response(status: error.status, headers: headers, body: Placeholder.png)
        }
        headers.append(("Content-Type", "application/json"))
        headers.append(("X-Thumbd-Error", error.code.rawValue))
        return Response(status: error.status, headers: headers, body: error.jsonBody)
    }
}
