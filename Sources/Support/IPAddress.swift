import Glibc

/// An IPv4 or IPv6 address: the one place text becomes an address (inet_pton) and an
/// address becomes a `sockaddr`. Which addresses are allowed is the product's business.
public enum IPAddress: Sendable, Equatable, CustomStringConvertible {
    case v4(UInt32)
    case v6([UInt8])

    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            self = .v4(UInt32(bigEndian: v4.s_addr))
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            self = .v6(withUnsafeBytes(of: &v6) { Array($0) })
            return
        }
        return nil
    }

    /// The historical IPv4 spellings inet_aton (and so curl) accepts: fewer than four parts,
    /// and octal or hexadecimal parts (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`).
    public init?(legacyIPv4 text: String) {
        guard !text.isEmpty, text.allSatisfy({ $0.isHexDigit || $0 == "." || $0 == "x" || $0 == "X" }) else { return nil }
        var v4 = in_addr()
        guard inet_aton(text, &v4) != 0 else { return nil }
        self = .v4(UInt32(bigEndian: v4.s_addr))
    }

    /// An address from its network-order bytes (4 or 16 of them).
    public init?(bytes: [UInt8]) {
        switch bytes.count {
        case 4: self = .v4(UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3]))
        case 16: self = .v6(bytes)
        default: return nil
        }
    }

    public var isIPv6: Bool {
        if case .v6 = self { return true }
        return false
    }

    /// Lends a `sockaddr_in` or `sockaddr_in6` for this address and `port`.
    public func withSocketAddress<T>(port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> T) rethrows -> T {
        switch self {
        case .v4(let value):
            var v4 = sockaddr_in()
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            v4.sin_addr.s_addr = value.bigEndian
            return try withUnsafePointer(to: &v4) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .v6(let bytes):
            var v6 = sockaddr_in6()
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &v6.sin6_addr) { $0.copyBytes(from: bytes) }
            return try withUnsafePointer(to: &v6) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
    }

    /// The address in its usual text form (inet_ntop).
    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch self {
        case .v4(let value):
            var raw = in_addr(s_addr: value.bigEndian)
            inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
        case .v6(let bytes):
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes) }
            inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
