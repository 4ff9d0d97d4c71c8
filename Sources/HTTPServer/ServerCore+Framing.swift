internal import CMicroHTTPD
import Dispatch
import Foundation
import Logging
import Support
import Synchronization

/// What the server refuses before the handler sees a request: ambiguous framing (RFC 9112).
extension ServerCore {
    /// RFC 9112 §6.3: a request whose body length is ambiguous is refused and the connection
    /// closed, since the next request's start could not be found. libmicrohttpd 0.9.75
    /// waits out its timeout for a transfer coding other than `chunked`, accepts two
    /// different Content-Length values and reads a body of 2^63 bytes; it answers
    /// HTTP/1.1 without Host.
    static func framingError(_ connection: OpaquePointer, http11: Bool, maxBodyBytes: Int) -> ServerRefusal? {
        func bad(_ message: String) -> ServerRefusal { .badFraming(message) }
        if http11, MHD_lookup_connection_value(connection, .HEADER_KIND, "host") == nil {
            return .missingHost
        }
        let coding = MHD_lookup_connection_value(connection, .HEADER_KIND, "transfer-encoding").map { String(cString: $0) }
        let lengths = MHD_lookup_connection_value(connection, .HEADER_KIND, "content-length") == nil
            ? [] : values(connection, named: "content-length")
        if let coding {
            guard coding.trimmingCharacters(in: .whitespaces).lowercased() == "chunked", http11 else {
                return bad("the only transfer coding accepted is chunked (HTTP/1.1)")
            }
            guard lengths.isEmpty else { return bad("Transfer-Encoding and Content-Length together") }
            guard values(connection, named: "transfer-encoding").count == 1 else { return bad("more than one Transfer-Encoding") }
            return nil
        }
        guard !lengths.isEmpty else { return nil }
        var length: UInt64?
        for field in lengths {
            for element in field.split(separator: ",", omittingEmptySubsequences: false) {
                let digits = element.trimmingCharacters(in: .whitespaces)
                guard !digits.isEmpty, digits.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
                    return bad("Content-Length is not a number")
                }
                guard let value = UInt64(digits) else { return .bodyTooLarge(limit: maxBodyBytes) }
                if let length, length != value { return bad("two different Content-Length values") }
                length = value
            }
        }
        if let length, length > UInt64(maxBodyBytes) { return .bodyTooLarge(limit: maxBodyBytes) }
        return nil
    }

    /// Every value of a header that may repeat (lower-case name).
    private static func values(_ connection: OpaquePointer, named name: String) -> [String] {
        let collector = ValueCollector(only: name)
        withExtendedLifetime(collector) {
            _ = MHD_get_connection_values(connection, .HEADER_KIND, { cls, _, key, value in
                guard let cls, let key else { return .YES }
                let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
                if strcasecmp(key, collector.only) == 0 { collector.all.append(value.map { String(cString: $0) } ?? "") }
                return .YES
            }, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.all
    }
}

/// What `values(_:named:)` collects through libmicrohttpd's callback.
private final class ValueCollector {
    var all: [String] = []
    let only: String
    init(only: String) { self.only = only }
}
