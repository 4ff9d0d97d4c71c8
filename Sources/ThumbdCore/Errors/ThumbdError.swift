import Support

/// An error a client sees: an HTTP status, a machine-readable code and a human message.
/// It renders itself as the contract's JSON body `{"error": ..., "message": ...}`.
package struct ThumbdError: Error, Sendable, Equatable, CustomStringConvertible {
    package let code: ErrorCode
    package let message: String
    /// The HTTP status, which the code decides.
    package var status: Int { code.status }

    package init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { "\(status) \(code): \(message)" }

    package var jsonBody: Bytes {
        Bytes("{\"error\":\(JSONText.quote(code.rawValue)),\"message\":\(JSONText.quote(message))}\n")
    }

    // Shorthands that say the status class where it is thrown (and check it).
    package static func badRequest(_ code: ErrorCode, _ message: String) -> ThumbdError { checked(400, code, message) }
    package static func forbidden(_ code: ErrorCode, _ message: String) -> ThumbdError { checked(403, code, message) }
    package static func badGateway(_ code: ErrorCode, _ message: String) -> ThumbdError { checked(502, code, message) }
    package static func unavailable(_ code: ErrorCode, _ message: String) -> ThumbdError { checked(503, code, message) }

    private static func checked(_ status: Int, _ code: ErrorCode, _ message: String) -> ThumbdError {
        precondition(code.status == status, "\(code) is not a \(status)")
        return .init(code, message)
    }
    package static let notFound = ThumbdError(.notFound, "no such resource")
    package static func upstreamStatus(_ status: Int) -> ThumbdError {
        .init(status == 410 ? .upstreamGone : .upstreamNotFound, "the origin answered \(status)")
    }
    package static let notAnImage = ThumbdError(.notAnImage, "the origin's body is not an image (judged by its bytes)")
    package static let upstreamTimeout = ThumbdError(.upstreamTimeout, "the origin did not answer in time")
    package static let cancelled = ThumbdError(.cancelled, "nobody waits for this fetch any more")
    package static let shuttingDown = ThumbdError(.shuttingDown, "thumbd is shutting down")
}

enum JSONText {
    /// A JSON string literal for `text`.
    static func quote(_ text: String) -> String {
        // Most text (a URL, a type, a preview's data URI) has nothing to escape: copied whole,
        // not scalar by scalar.
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) else {
            return "\"" + text + "\""
        }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                    + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
