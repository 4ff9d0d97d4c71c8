import Foundation
import Glibc
import Support
import Synchronization
import Upstream

/// Decides which upstream URLs thumbd may fetch: http(s) only, no credentials, an optional
/// host allow list, and no private/loopback/link-local/multicast addresses unless allowed.
/// Names are checked here; addresses are checked again on the address curl actually
/// connected to, on every redirect hop (see `Transfer`).
package struct DestinationPolicy: Sendable {
    /// The two rules a reload (SIGHUP) may change, shared by every copy of this policy: the
    /// handlers' and the transfer loops' connect checks see a change at once.
    private let rules: Rules
    package var maxURLLength = 4096

    package init(allowPrivateNetworks: Bool, allowHosts: [String]) {
        rules = Rules(allowPrivateNetworks: allowPrivateNetworks, allowHosts: allowHosts.map { $0.lowercased() })
    }

    package var allowPrivateNetworks: Bool { rules.current.withLock { $0.allowPrivateNetworks } }
    package var allowHosts: [String] { rules.current.withLock { $0.allowHosts } }

    /// Replaces the rules of this policy and of every copy of it; a URL accepted under the
    /// old ones is judged again.
    package func replace(allowPrivateNetworks: Bool, allowHosts: [String]) {
        rules.current.withLock { $0 = (allowPrivateNetworks, allowHosts.map { $0.lowercased() }) }
        memo.clear()
    }

    private final class Rules: Sendable {
        let current: Mutex<(allowPrivateNetworks: Bool, allowHosts: [String])>
        init(allowPrivateNetworks: Bool, allowHosts: [String]) { current = Mutex((allowPrivateNetworks, allowHosts)) }
    }

    /// A URL that passed validation, normalized (lower-case scheme and host, no default
    /// port, no fragment): the normalized form is the cache key.
    package struct Destination: Sendable, Equatable {
        package var url: String
        package var host: String
    }

    /// Validation results for recently seen raw URLs. Parsing with URLComponents (IDNA
    /// included) was half of the handler's time on a hot hit; an accepted URL stays accepted
    /// until the rules change (`replace`). Bounded: cleared when full.
    private let memo = ValidationMemo()

    package func validate(_ raw: String?) throws(ThumbdError) -> Destination {
        if let raw, let known = memo.lookup(raw) { return known }
        let destination = try validateUncached(raw)
        // The URL fetched and keyed must be its own normal form, or the same image would have
        // two keys, and a link made from it would be refused. Foundation's IDNA has spelled
        // hosts it cannot read back (found by fuzzing, four ways): whatever else it does, a
        // URL whose normal form does not normalize to itself is refused.
        if destination.url != raw, (try? validateUncached(destination.url)) != destination {
            throw .badRequest(.malformedURL, "the url's host does not keep its form once normalized (IDNA)")
        }
        memo.store(raw!, destination)
        return destination
    }

    private func validateUncached(_ raw: String?) throws(ThumbdError) -> Destination {
        guard let raw, !raw.isEmpty else {
            throw .badRequest(.missingURL, "the url parameter is required")
        }
        guard raw.utf8.count <= maxURLLength else {
            throw .badRequest(.urlTooLong, "the url is longer than \(maxURLLength) bytes")
        }
        // Control bytes and spaces are never part of a URL (RFC 3986); Foundation would
        // percent-encode them, so the URL would not be its own normalized form (found by
        // fuzzing: a batch's src would then name a second cache key).
        guard !raw.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else {
            throw .badRequest(.malformedURL, "the url contains spaces or control characters")
        }
        guard var components = URLComponents(string: raw), let scheme = components.scheme?.lowercased() else {
            throw .badRequest(.malformedURL, "the url is not an absolute URL")
        }
        guard scheme == "http" || scheme == "https" else {
            throw .badRequest(.unsupportedScheme, "only http and https URLs are fetched")
        }
        guard let rawHost = components.host, !rawHost.isEmpty else {
            throw .badRequest(.malformedURL, "the url has no host")
        }
        guard components.user == nil, components.password == nil else {
            throw .badRequest(.credentialsInURL, "URLs with user names or passwords are not fetched")
        }
        if let port = components.port, !(1...65535).contains(port) {
            throw .badRequest(.malformedURL, "the url's port \(port) is not 1-65535")
        }
        let host = rawHost.lowercased()
        components.scheme = scheme
        components.host = host
        components.fragment = nil
        if (scheme == "http" && components.port == 80) || (scheme == "https" && components.port == 443) {
            components.port = nil
        }
        if components.path.isEmpty { components.path = "/" }
        // The host judged below is the normalized URL's, as curl will ask for it: a name
        // given in Unicode or percent-encoded is judged in its IDNA form (`xn--…`), so the
        // allow list and the loopback names see what is fetched (found by fuzzing: the two
        // differed, so a URL's own normal form was not accepted as the same destination).
        guard let normalized = components.string, let fetched = URLComponents(string: normalized)?.encodedHost?.lowercased(),
              !fetched.isEmpty
        else {
            throw .badRequest(.malformedURL, "the url cannot be normalized")
        }
        // Normalizing percent-encodes what the URL spelled raw (3 bytes a byte, and 9 for a
        // character that is not valid UTF-8): the limit holds for the URL that is fetched and
        // keyed, so that it is also its own normal form (found by fuzzing).
        guard normalized.utf8.count <= maxURLLength else {
            throw .badRequest(.urlTooLong, "the url is longer than \(maxURLLength) bytes once normalized (percent-encoded)")
        }
        // A name is letters, digits, `-`, `.` and `_` once in its IDNA form (what DNS and curl
        // take); anything else (`=`, a percent-encoded byte) Foundation's IDNA spells one way
        // and parses back another (found by fuzzing). An address literal is bracketed.
        guard fetched.hasPrefix("[") || fetched.utf8.allSatisfy(Self.isNameByte) else {
            throw .badRequest(.malformedURL, "the url's host \(fetched) is not a host name (letters, digits, -, . and _) or an address")
        }
        let bareHost = fetched.hasPrefix("[") ? String(fetched.dropFirst().dropLast()) : fetched
        guard isAllowed(host: bareHost) else {
            throw .forbidden(.hostNotAllowed, "\(bareHost) is not in the allow list")
        }
        // Literal addresses are refused here, without any connection; names (and the
        // forms caught below) are refused on their resolved address before connecting.
        // `127.1`, `2130706433`, `0x7f000001` and `0177.0.0.1` are IPv4 to curl (inet_aton);
        // a zone index (`[fe80::1%25eth0]`) only ever names a local link.
        if !allowPrivateNetworks {
            let allowedBy = " (upstream.allowPrivateNetworks: true allows it)"
            if bareHost.contains("%") {
                throw .forbidden(.destinationNotAllowed, "\(bareHost) names a local network interface" + allowedBy)
            }
            if let address = IPAddress(bareHost) ?? IPAddress(legacyIPv4: bareHost), !isAllowed(address: address) {
                throw .forbidden(.destinationNotAllowed, "\(bareHost) is a private or local address" + allowedBy)
            }
            // RFC 6761 §6.3: `localhost` and every name under it are loopback, whatever a
            // resolver says; refused without asking one (`localhost.` and `a.localhost` too).
            let name = bareHost.hasSuffix(".") ? String(bareHost.dropLast()) : bareHost
            if name == "localhost" || name.hasSuffix(".localhost") {
                throw .forbidden(.destinationNotAllowed, "\(bareHost) is a loopback name" + allowedBy)
            }
        }
        return Destination(url: normalized, host: bareHost)
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) || byte == 0x2D || byte == 0x2E || byte == 0x5F
    }

    package func isAllowed(host: String) -> Bool {
        guard !allowHosts.isEmpty else { return true }
        let host = host.lowercased()
        return allowHosts.contains { pattern in
            if pattern.hasPrefix("*.") {
                let suffix = pattern.dropFirst(1)  // ".example.org"
                return host.hasSuffix(suffix) || host == pattern.dropFirst(2)
            }
            return host == pattern
        }
    }

    package func isAllowed(address: IPAddress) -> Bool {
        allowPrivateNetworks || address.isPublic
    }

    /// This policy as the transfer loop's check before every connect.
    var connectCheck: ConnectCheck {
        ConnectCheck(allowsAddress: { isAllowed(address: $0) }, allowsHost: { isAllowed(host: $0) })
    }
}

final class ValidationMemo: Sendable {
    private let entries = Mutex<[String: DestinationPolicy.Destination]>([:])
    private let capacity = 16_384

    func lookup(_ raw: String) -> DestinationPolicy.Destination? {
        entries.withLock { $0[raw] }
    }

    func clear() { entries.withLock { $0.removeAll() } }

    func store(_ raw: String, _ destination: DestinationPolicy.Destination) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[raw] = destination
        }
    }
}

extension IPAddress {
    /// False for loopback, private, shared (CGNAT), link-local, multicast, unspecified,
    /// reserved and documentation ranges, in IPv4, IPv6 and IPv4-mapped IPv6.
    package var isPublic: Bool {
        switch self {
        case .v4(let a):
            func inRange(_ base: UInt32, _ bits: UInt32) -> Bool {
                let mask: UInt32 = bits == 0 ? 0 : ~UInt32(0) << (32 - bits)
                return a & mask == base & mask
            }
            let blocked: [(UInt32, UInt32)] = [
                (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
                (0x0A00_0000, 8),  // 10/8
                (0x6440_0000, 10),  // 100.64/10 shared address space
                (0x7F00_0000, 8),  // 127/8 loopback
                (0xA9FE_0000, 16),  // 169.254/16 link-local
                (0xAC10_0000, 12),  // 172.16/12
                (0xC000_0000, 24),  // 192.0.0/24 protocol assignments
                (0xC000_0200, 24),  // 192.0.2/24 documentation
                (0xC0A8_0000, 16),  // 192.168/16
                (0xC612_0000, 15),  // 198.18/15 benchmarking
                (0xC633_6400, 24),  // 198.51.100/24 documentation
                (0xCB00_7100, 24),  // 203.0.113/24 documentation
                (0xE000_0000, 4),  // 224/4 multicast
                (0xF000_0000, 4),  // 240/4 reserved + broadcast
            ]
            return !blocked.contains { inRange($0.0, $0.1) }
        case .v6(let b):
            func embedded(_ at: Int) -> IPAddress {
                .v4(UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3]))
            }
            if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF {  // ::ffff:a.b.c.d mapped
                return embedded(12).isPublic
            }
            if b[0..<8].allSatisfy({ $0 == 0 }) && b[8] == 0xFF && b[9] == 0xFF && b[10] == 0 && b[11] == 0 {
                return embedded(12).isPublic  // ::ffff:0:a.b.c.d translated (RFC 2765)
            }
            // ::/96: the unspecified address, ::1, and the deprecated IPv4-compatible ::a.b.c.d,
            // which no package destination uses.
            if b[0..<12].allSatisfy({ $0 == 0 }) { return false }
            if b[0..<8].allSatisfy({ $0 == 0 }) { return false }  // ::/64 rest: reserved
            if b[0] == 0x01 && b[1] == 0x00 && b[2..<8].allSatisfy({ $0 == 0 }) { return false }  // 100::/64 discard
            if b[0] & 0xFE == 0xFC { return false }  // fc00::/7 unique local
            if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return false }  // fe80::/10 link-local
            if b[0] == 0xFE && b[1] & 0xC0 == 0xC0 { return false }  // fec0::/10 site-local (deprecated)
            if b[0] == 0xFF { return false }  // ff00::/8 multicast
            if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return false }  // 2001:db8::/32 docs
            if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00 {  // 2001::/32 Teredo
                // Server address in clear, client address inverted: both must be public.
                let client = IPAddress.v4(~(UInt32(b[12]) << 24 | UInt32(b[13]) << 16 | UInt32(b[14]) << 8 | UInt32(b[15])))
                return embedded(4).isPublic && client.isPublic
            }
            if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] & 0xF0 == 0x10 { return false }  // 2001:10::/28 ORCHID
            if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x02 && b[4] == 0 && b[5] == 0 {
                return false  // 2001:2::/48 benchmarking
            }
            if b[0] == 0x20 && b[1] == 0x02 { return embedded(2).isPublic }  // 2002::/16 6to4
            if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B {
                if b[4..<12].allSatisfy({ $0 == 0 }) { return embedded(12).isPublic }  // 64:ff9b::/96 NAT64
                if b[4] == 0x00 && b[5] == 0x01 { return false }  // 64:ff9b:1::/48 local-use NAT64
            }
            return true
        }
    }
}
