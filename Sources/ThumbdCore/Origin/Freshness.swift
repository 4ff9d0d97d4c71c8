import Foundation
import Upstream

/// How long a fetched response may be served from the cache, and how it may be served once
/// stale. The subset of RFC 9111 a shared image cache needs: `no-store`/`private` are not
/// stored, `no-cache` is stored but stale at once and always revalidated, `s-maxage` wins
/// over `max-age`, which wins over `Expires`; otherwise the configured default. Always
/// capped at the configured maximum. `stale-while-revalidate` (RFC 5861) lengthens the
/// grace; `must-revalidate`, `proxy-revalidate` and `no-cache` forbid serving it stale.
struct Freshness: Equatable {
    var storable: Bool
    var ttlSeconds: Int
    /// What the origin allows once stale: its `stale-while-revalidate` seconds (0 when it
    /// says nothing; the configured grace applies), or `mustRevalidate` (-1): never stale.
    var graceSeconds: Int = 0

    static let mustRevalidate = -1

    init(storable: Bool, ttlSeconds: Int, graceSeconds: Int = 0) {
        self.storable = storable
        self.ttlSeconds = ttlSeconds
        self.graceSeconds = graceSeconds
    }

    static func of(cacheControl: String?, expires: String?, date: String?, now: Date,
                   defaultTTL: Int, maxTTL: Int) -> Freshness {
        var maxAge: Int?
        var sharedMaxAge: Int?
        var grace = 0
        var mustRevalidate = false
        var noCache = false
        for directive in (cacheControl ?? "").split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1)
            let name = parts[0].trimmingCharacters(in: .whitespaces).lowercased()
            let value = parts.count > 1
                ? parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                : nil
            switch name {
            case "no-store", "private": return Freshness(storable: false, ttlSeconds: 0)
            case "no-cache": noCache = true
            case "must-revalidate", "proxy-revalidate": mustRevalidate = true
            case "stale-while-revalidate": grace = value.flatMap { Int($0) }.map { min(max(0, $0), maxTTL) } ?? 0
            case "max-age": maxAge = value.flatMap { Int($0) }.map { max(0, $0) } ?? 0
            case "s-maxage": sharedMaxAge = value.flatMap { Int($0) }.map { max(0, $0) } ?? 0
            default: break
            }
        }
        if mustRevalidate || noCache { grace = Self.mustRevalidate }
        if noCache { return Freshness(storable: true, ttlSeconds: 0, graceSeconds: grace) }
        if let ttl = sharedMaxAge ?? maxAge {
            return Freshness(storable: true, ttlSeconds: min(ttl, maxTTL), graceSeconds: grace)
        }
        if let expires {
            // An invalid Expires (often "0" or "-1") means already expired (RFC 9111 §5.3).
            guard let expiry = HTTPDate.parse(expires) else { return Freshness(storable: true, ttlSeconds: 0, graceSeconds: grace) }
            let reference = date.flatMap(HTTPDate.parse) ?? now
            let ttl = Int(expiry.timeIntervalSince(reference).rounded(.down))
            return Freshness(storable: true, ttlSeconds: min(max(0, ttl), maxTTL), graceSeconds: grace)
        }
        return Freshness(storable: true, ttlSeconds: min(defaultTTL, maxTTL), graceSeconds: grace)
    }

    /// Whether the origin sent anything that sets freshness (a 304 without it keeps the
    /// stored copy's lifetime, RFC 9111 §4.3.4).
    static func isExplicit(cacheControl: String?, expires: String?) -> Bool {
        expires != nil || (cacheControl ?? "").lowercased().contains("max-age") || (cacheControl ?? "").lowercased().contains("no-cache")
    }

    /// Seconds an expired object may still be served at once while one refresh runs: the
    /// configured grace, or the origin's longer `stale-while-revalidate`; none when the
    /// origin said `must-revalidate` or `no-cache`.
    static func grace(of objectGrace: Int, configured: Int) -> Int {
        objectGrace == mustRevalidate ? 0 : max(configured, objectGrace)
    }
}
