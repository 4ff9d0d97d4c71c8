import BlobStore
import Foundation
import HTTPServer
import Upstream

/// `GET|HEAD /thumb?url=…`: parse → destination policy → `Lookup` (hit, stale, or the one
/// fetch or resize for this key) → answer every waiter from its outcome.
struct ThumbHandler: Sendable {
    let source: ObjectSource
    let variants: VariantSource
    let policy: DestinationPolicy
    let signer: URLSigner

    func handle(_ request: Request, context: RequestContext, requestID: String? = nil) -> HandlerResult {
        let placeholder: Placeholder?
        do {
            placeholder = try ThumbRequest.wantsPlaceholder(request)
        } catch {
            return .response(.error(error))
        }
        // A misspelt parameter is the client's real problem, whatever its signature says.
        if request.query.count > 1 {
            do {
                try ParameterNames.check(request.query.keys, known: ParameterNames.thumb)
            } catch {
                return .response(Self.failure(error, cache: nil, placeholder: placeholder))
            }
        }
        if signer.isEnabled, !signer.verify(request.query["sig"], { request.query[$0] }) {
            return .response(Self.failure(ThumbdError(.badSignature, "sig is missing or wrong for this url and these parameters"),
                                          cache: nil, placeholder: placeholder))
        }
        let thumb: ThumbRequest
        do {
            thumb = try ThumbRequest(request, policy: policy, avif: variants.thumbnailer.canEncodeAVIF,
                                     offered: variants.autoFormats, presets: variants.presets)
        } catch {
            return .response(Self.failure(error, cache: nil, placeholder: placeholder))
        }
        let target: LookupTarget = thumb.variant.map { .variant($0, of: thumb.destination) } ?? .original(thumb.destination)
        // format=auto: the answer depends on Accept, and caches in front must know it.
        let vary = thumb.variant?.varyOnAccept ?? false
        let counters = source.counters
        let conditions = thumb.conditions
        let lookup = Lookup(source: source, variants: variants)
        let clock = CacheStore.nowMilliseconds()
        let now = clock / 1000
        let answer = lookup.request(target, priority: thumb.priority, requestID: requestID, clock: clock) {
            { outcome, role, stale in
                context.respond(Self.answer(outcome, role: role, stale: stale, conditions: conditions, placeholder: placeholder,
                                            counters: counters, vary: vary))
            }
        }
        switch answer {
        case .hit(let stored):
            counters.count(.hit)
            if stored.status == 200 {
                return .response(Self.image(stored, cache: "hit", conditions: conditions, now: now, vary: vary))
            }
            return .response(Self.failure(
                .upstreamStatus(stored.status), cache: "hit", placeholder: placeholder,
                maxAge: stored.remainingSeconds(at: now)))
        case .stale(let stale):
            // Expired, within its grace: answered at once while one refresh runs behind it.
            return .response(Self.staleAnswer(stale, conditions: conditions, counters: counters, now: now, vary: vary))
        case .ready(let ready, let stale):  // finished a moment ago, still being stored: a hit
            return .response(Self.answer(ready, role: .finished, stale: stale, conditions: conditions,
                                         placeholder: placeholder, counters: counters, vary: vary))
        case .waiting(let ticket, _, _, _):
            context.onClientGone { lookup.leave(ticket) }
            return .suspend
        }
    }

    /// The response for one waiter, from the outcome every waiter of the flight shares.
    private static func answer(_ outcome: FlightOutcome, role: FlightRole, stale: CachedObject?,
                               conditions: Conditions, placeholder: Placeholder?, counters: CacheCounters, vary: Bool = false) -> Response {
        let now = ObjectSource.now()
        switch Settled(outcome, role: role, stale: stale) {
        case .object(let object, let result):
            counters.count(result)
            return image(object, cache: result.rawValue, conditions: conditions, now: now, vary: vary)
        case .stale(let stale):
            return staleAnswer(stale, conditions: conditions, counters: counters, now: now, vary: vary)
        case .failure(let error, let result):
            // Counted as a batch item's failure is: how it was served (a miss that failed is a
            // miss, as nginx's and Varnish's cache status say), whatever the outcome.
            counters.count(result)
            let maxAge: Int64? = (error.status == 404 || error.status == 410) ? 0 : nil
            return failure(error, cache: result.rawValue, placeholder: placeholder, maxAge: maxAge)
        }
    }

    /// An expired copy, said to be one (`X-Thumbd-Cache: stale`, `max-age=0`, a `Warning`).
    private static func staleAnswer(_ stale: CachedObject, conditions: Conditions, counters: CacheCounters, now: Int64,
                                    vary: Bool = false) -> Response {
        counters.count(.stale)
        var response = image(stale, cache: "stale", conditions: conditions, now: now, vary: vary)
        response.headers.append(("Warning", "110 thumbd \"Response is Stale\""))
        return response
    }

    /// `public, max-age=<seconds>`, its digits written into the string as it is made: an
    /// interpolation grew it in steps, 1% of a hot hit's instructions.
    static func publicMaxAge(_ seconds: Int64) -> String {
        let prefix: StaticString = "public, max-age="
        let start = prefix.utf8CodeUnitCount
        let value = UInt64(max(0, seconds))
        var digits = 1
        var rest = value
        while rest >= 10 { rest /= 10; digits += 1 }
        return String(unsafeUninitializedCapacity: start + digits) { buffer in
            // The prefix in one copy, then the digits from the last: no per-byte bounds
            // checks or generic stride (600 instructions a hit, before).
            guard let base = buffer.baseAddress else { return 0 }
            base.update(from: prefix.utf8Start, count: start)
            var value = value
            var offset = start + digits
            repeat {
                offset -= 1
                base[offset] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
                value /= 10
            } while value > 0
            return start + digits
        }
    }

    static func image(_ object: CachedObject, cache: String, conditions: Conditions, now: Int64, vary: Bool = false) -> Response {
        // Bounded again here for objects stored before origin headers were validated.
        let lastModified = object.lastModified.flatMap { $0.utf8.count <= OriginHeaders.maxDateBytes ? $0 : nil }
        let cacheControl = Self.publicMaxAge(object.remainingSeconds(at: now))
        if conditions.notModified(etag: object.etag, lastModified: object.lastModified) {
            // With the 200's body, which MHD never sends on a 304 (as on a HEAD) but whose
            // length it states: an empty body would say `Content-Length: 0`, contradicting
            // the 200 (RFC 9110 §8.6). The body is shared, not copied.
            var headers: [(String, String)] = [("ETag", object.etag), ("Cache-Control", cacheControl), ("X-Thumbd-Cache", cache)]
            // format=auto: the answer depends on Accept, and caches in front must know it.
            if vary { headers.append(("Vary", "Accept")) }
            if let lastModified { headers.append(("Last-Modified", lastModified)) }
            return Response(status: 304, headers: headers, body: object.body)
        }
        // The common answer, a plain hit, in one array made at its size (appending past an
        // array literal's size made it twice, on every hit).
        guard vary || lastModified != nil else {
            return Response(status: 200, headers: [
                ("ETag", object.etag), ("Cache-Control", cacheControl), ("X-Thumbd-Cache", cache),
                ("Content-Type", object.contentType), ("X-Content-Type-Options", "nosniff"),
            ], body: object.body)
        }
        var headers: [(String, String)] = [("ETag", object.etag), ("Cache-Control", cacheControl), ("X-Thumbd-Cache", cache)]
        if vary { headers.append(("Vary", "Accept")) }
        if let lastModified { headers.append(("Last-Modified", lastModified)) }
        headers.append(("Content-Type", object.contentType))
        headers.append(("X-Content-Type-Options", "nosniff"))
        return Response(status: 200, headers: headers, body: object.body)
    }

    static func failure(_ error: ThumbdError, cache: String?, placeholder: Placeholder?, maxAge: Int64? = nil) -> Response {
        var headers: [(String, String)] = []
        if let cache { headers.append(("X-Thumbd-Cache", cache)) }
        headers.append(("Cache-Control", maxAge.map(publicMaxAge) ?? "no-store"))
        if error.code == .busy { headers.append(("Retry-After", "1")) }
        if let placeholder {
            headers.append(("Content-Type", placeholder.contentType))
            headers.append(("X-Content-Type-Options", "nosniff"))
            // An SVG opened by itself is a document: this one has no script, and may load nothing.
            if placeholder.isSVG { headers.append(("Content-Security-Policy", "default-src 'none'")) }
            // A sized one is an SVG or a PNG by the client's Accept.
            if placeholder.isSized { headers.append(("Vary", "Accept")) }
            headers.append(("X-Thumbd-Error", error.code.rawValue))
            return Response(status: error.status, headers: headers, body: placeholder.body)
        }
        headers.append(("Content-Type", "application/json"))
        headers.append(("X-Thumbd-Error", error.code.rawValue))
        return Response(status: error.status, headers: headers, body: error.jsonBody)
    }
}
