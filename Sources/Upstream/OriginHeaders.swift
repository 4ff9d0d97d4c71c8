import Support

/// The few response headers of an origin that thumbd uses, each bounded and validated as it
/// arrives. Everything else the origin sends is ignored, so nothing it says can grow a
/// stored object's metadata or a later response's header block: an 8 KB `Last-Modified`
/// once made every hit on that object a dead connection (libmicrohttpd could not fit the
/// header in its connection pool).
///
/// - Values are kept only when they are short, printable ASCII and well-formed for their
///   header; an invalid one is dropped as if absent (RFC 9110 §5.5: a recipient may
///   ignore an invalid field), which for freshness means the configured default.
/// - `Content-Length` must agree with itself: two different values (in two fields or one
///   list) are a framing error (RFC 9112 §6.3), refused as `upstream_bad_framing`.
/// - Trailers (fields after the body began) are ignored.
public struct OriginHeaders {
    /// Longest value kept for a date field; IMF-fixdate is 29 bytes.
    public static let maxDateBytes = 64
    /// Longest entity tag kept (quotes included).
    static let maxETagBytes = 256
    /// Longest Cache-Control kept.
    static let maxCacheControlBytes = 512

    private(set) var etag: String?
    private(set) var lastModified: String?
    private(set) var cacheControl: String?
    private(set) var expires: String?
    private(set) var date: String?
    private(set) var contentLength: Int?
    /// Set when the framing is contradictory; the transfer must stop.
    private(set) var conflictingLength = false

    /// Forgets everything: a new response begins (after a redirect or a 1xx).
    mutating func reset() { self = OriginHeaders() }

    /// Takes one raw header line (`Name: value\r\n`). Returns false when the response must
    /// be refused.
    mutating func take(_ line: UnsafeRawBufferPointer) -> Bool {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return true }
        let name = line[..<colon]
        // Only the names below are looked at; compare before making any String.
        guard let field = Field(name) else { return true }
        var value = line[(colon + 1)...]
        while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
        while let last = value.last, last == 0x20 || last == 0x09 || last == 0x0D || last == 0x0A { value = value.dropLast() }
        switch field {
        case .contentLength:
            return takeContentLength(value)
        case .etag:
            guard value.count <= Self.maxETagBytes, Self.isEntityTag(value) else { return true }
            etag = String(decoding: value, as: UTF8.self)
        case .lastModified:
            lastModified = Self.date(value)
        case .expires:
            // An invalid Expires still means "expired" (RFC 9111 §5.3): keep a marker.
            expires = value.count <= Self.maxDateBytes && Self.isPrintable(value) ? String(decoding: value, as: UTF8.self) : "0"
        case .date:
            date = Self.date(value)
        case .cacheControl:
            guard value.count <= Self.maxCacheControlBytes, Self.isPrintable(value) else { return true }
            // Repeated fields are one comma-separated list (RFC 9110 §5.3).
            let text = String(decoding: value, as: UTF8.self)
            let joined = cacheControl.map { $0 + ", " + text } ?? text
            if joined.utf8.count <= Self.maxCacheControlBytes { cacheControl = joined }
        }
        return true
    }

    private mutating func takeContentLength(_ value: UnsafeRawBufferPointer.SubSequence) -> Bool {
        for element in value.split(separator: UInt8(ascii: ",")) {
            var digits = element[...]
            while let first = digits.first, first == 0x20 || first == 0x09 { digits = digits.dropFirst() }
            while let last = digits.last, last == 0x20 || last == 0x09 { digits = digits.dropLast() }
            guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ (0x30...0x39).contains($0) }),
                  let length = Int(String(decoding: digits, as: UTF8.self))
            else {
                conflictingLength = true
                return false
            }
            if let known = contentLength, known != length {
                conflictingLength = true
                return false
            }
            contentLength = length
        }
        return true
    }

    private enum Field {
        case contentLength, etag, lastModified, expires, date, cacheControl

        init?(_ name: UnsafeRawBufferPointer.SubSequence) {
            func equals(_ literal: StaticString) -> Bool {
                guard name.count == literal.utf8CodeUnitCount else { return false }
                return zip(name, UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
                    .allSatisfy { a, b in a == b || ((0x41...0x5A).contains(a) && a | 0x20 == b) }
            }
            switch name.count {
            case 14 where equals("content-length"): self = .contentLength
            case 4 where equals("etag"): self = .etag
            case 13 where equals("last-modified"): self = .lastModified
            case 13 where equals("cache-control"): self = .cacheControl
            case 7 where equals("expires"): self = .expires
            case 4 where equals("date"): self = .date
            default: return nil
            }
        }
    }

    /// Visible ASCII and spaces only: no control bytes, no obs-text.
    static func isPrintable(_ value: UnsafeRawBufferPointer.SubSequence) -> Bool {
        value.allSatisfy { (0x20...0x7E).contains($0) || $0 == 0x09 }
    }

    /// `"…"` or `W/"…"` with etagc characters inside (RFC 9110 §8.8.3), ASCII only.
    static func isEntityTag(_ value: UnsafeRawBufferPointer.SubSequence) -> Bool {
        var rest = value[...]
        if rest.starts(with: [UInt8(ascii: "W"), UInt8(ascii: "/")]) { rest = rest.dropFirst(2) }
        guard rest.count >= 2, rest.first == 0x22, rest.last == 0x22 else { return false }
        return rest.dropFirst().dropLast().allSatisfy { $0 == 0x21 || (0x23...0x7E).contains($0) }
    }

    /// A valid HTTP date, as the canonical IMF-fixdate; nil otherwise.
    private static func date(_ value: UnsafeRawBufferPointer.SubSequence) -> String? {
        guard value.count <= maxDateBytes, isPrintable(value) else { return nil }
        let text = String(decoding: value, as: UTF8.self)
        return HTTPDate.parse(text) != nil ? text : nil
    }
}
