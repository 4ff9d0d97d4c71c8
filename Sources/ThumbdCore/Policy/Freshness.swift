import Foundation
import Upstream

/// How long a fetched response may be served from the cache. The subset of RFC 9111 a
/// shared image cache needs now: `no-store`/`private` are not stored, `no-cache` is stored
/// but stale at once, `s-maxage` wins over `max-age`, which wins over `Expires`; otherwise
/// the configured default. Always capped at the configured maximum.
struct Freshness: Equatable {
    var storable: Bool
    var ttlSeconds: Int

    static func of(cacheControl: String?, expires: String?, date: String?, now: Date,
                   defaultTTL: Int, maxTTL: Int) -> Freshness {
        var maxAge: Int?
        var sharedMaxAge: Int?
        for directive in (cacheControl ?? "").split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1)
            let name = parts[0].trimmingCharacters(in: .whitespaces).lowercased()
            let value = parts.count > 1
                ? parts[1].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
                : nil
            switch name {
            case "no-store", "private": return Freshness(storable: false, ttlSeconds: 0)
            case "no-cache": return Freshness(storable: true, ttlSeconds: 0)
            case "max-age": maxAge = value.flatMap { Int($0) }.map { max(0, $0) } ?? 0
            case "s-maxage": sharedMaxAge = value.flatMap { Int($0) }.map { max(0, $0) } ?? 0
            default: break
            }
        }
        if let ttl = sharedMaxAge ?? maxAge {
            return Freshness(storable: true, ttlSeconds: min(ttl, maxTTL))
        }
        if let expires {
            // An invalid Expires (often "0" or "-1") means already expired (RFC 9111 §5.3).
            guard let expiry = HTTPDate.parse(expires) else { return Freshness(storable: true, ttlSeconds: 0) }
            let reference = date.flatMap(HTTPDate.parse) ?? now
            let ttl = Int(expiry.timeIntervalSince(reference).rounded(.down))
            return Freshness(storable: true, ttlSeconds: min(max(0, ttl), maxTTL))
        }
        return Freshness(storable: true, ttlSeconds: min(defaultTTL, maxTTL))
    }
}
