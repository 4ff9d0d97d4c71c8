import Foundation
import Support
import HTTPServer
import Logging
import Synchronization

/// `X-Request-Id` and the access log. Every answer carries an id: the client's own when it
/// sent a sane one (a proxy in front may have made it), else a new one; the access log line
/// carries it too, so a client's report can be found in the log.
struct RequestLog: Sendable {
    /// Nil when the access log is off.
    let access: Logger?

    static func isSane(_ given: String) -> Bool {
        (1...128).contains(given.utf8.count) && given.utf8.allSatisfy { Self.idByte($0) }
    }

    private static func idByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"):
            true
        default: false
        }
    }

    /// One line for a finished request.
    func finished(_ exchange: Exchange) {
        guard let access else { return }
        let duration = exchange.duration()
        access.info("access", metadata: [
            "http.method": "\(exchange.method)",
            "http.path": "\(Self.loggable(exchange))",
            "http.status": "\(exchange.status)",
            "http.bytes": "\(exchange.bodyBytes.map(String.init) ?? "-")",
            "cache": "\(exchange.header("X-Thumbd-Cache") ?? "-")",
            "error": "\(exchange.header("X-Thumbd-Error") ?? "-")",
            "duration_ms": "\(String(format: "%.3f", Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1000))",
            "request.id": "\(exchange.header("X-Request-Id") ?? "-")",
        ])
    }

    /// The path and query as logged: `sig` is never written, and the `url` parameter loses
    /// its own query and fragment (where origins put access tokens; a lone `?` says one was cut); other values are kept,
    /// percent-encoded, in a fixed order.
    static func loggable(_ exchange: Exchange) -> String {
        guard !exchange.query.isEmpty else { return exchange.path }
        let parts = exchange.query.keys.sorted().map { name -> String in
            var value = exchange.query[name] ?? ""
            if name == "sig" {
                value = "-"
            } else if name == "url", let cut = value.firstIndex(where: { $0 == "?" || $0 == "#" }) {
                value = String(value[..<cut]) + "?"
            }
            return QueryValue.encode(name) + "=" + QueryValue.encode(value)
        }
        return exchange.path + "?" + parts.joined(separator: "&")
    }
}

/// Makes the ids of requests that came without one: 7 random hex digits chosen at start, then
/// a counter (15 hex digits in all: a String that short is stored inline, without an
/// allocation). Unique within a run and across runs in practice, and cheap: no system call
/// per request (the system generator costs one).
final class RequestIDs: Sendable {
    private let prefix = UInt64.random(in: 0 ..< 1 << 28) | 1 << 27
    private let counter = Atomic<UInt64>(0)

    /// The client's `X-Request-Id` when it is 1–128 characters of letters, digits and
    /// `-_.:` (nothing that could forge a log line), else a new one.
    func id(for request: Request) -> String {
        if let given = request.headers["x-request-id"], RequestLog.isSane(given) { return given }
        return fresh()
    }

    /// A new id.
    func fresh() -> String {
        let value = prefix << 32 | (counter.add(1, ordering: .relaxed).newValue & 0xFFFF_FFFF)
        // 15 hex digits (the prefix's top bit is set), written directly: String(_:radix:)
        // was a visible share of a hit.
        return String(unsafeUninitializedCapacity: 15) { digits in
            var rest = value
            for index in stride(from: 14, through: 0, by: -1) {
                digits[index] = Self.hex[Int(rest & 0xF)]
                rest >>= 4
            }
            return 15
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)
}
