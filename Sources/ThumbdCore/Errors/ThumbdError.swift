/// An error a client sees: an HTTP status, a machine-readable code and a human message.
/// It renders itself as the contract's JSON body `{"error": ..., "message": ...}`.
public struct ThumbdError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    public let code: String
    public let message: String

    public init(status: Int, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(status) \(code): \(message)" }

    public var jsonBody: Bytes {
        Bytes("{\"error\":\(JSONText.quote(code)),\"message\":\(JSONText.quote(message))}\n")
    }

    // 400
    public static func badRequest(_ code: String, _ message: String) -> ThumbdError {
        .init(status: 400, code: code, message: message)
    }
    // 403
    public static func forbidden(_ code: String, _ message: String) -> ThumbdError {
        .init(status: 403, code: code, message: message)
    }
    public static let notFound = ThumbdError(status: 404, code: "not_found", message: "no such resource")
    public static func upstreamStatus(_ status: Int) -> ThumbdError {
        .init(status: status, code: status == 410 ? "upstream_gone" : "upstream_not_found",
              message: "the origin answered \(status)")
    }
    public static let notAnImage = ThumbdError(
        status: 415, code: "not_an_image", message: "the origin's body is not an image (judged by its bytes)")
    public static func badGateway(_ code: String, _ message: String) -> ThumbdError {
        .init(status: 502, code: code, message: message)
    }
    public static func unavailable(_ code: String, _ message: String) -> ThumbdError {
        .init(status: 503, code: code, message: message)
    }
    public static let upstreamTimeout = ThumbdError(
        status: 504, code: "upstream_timeout", message: "the origin did not answer in time")
    public static let cancelled = ThumbdError(
        status: 499, code: "cancelled", message: "nobody waits for this fetch any more")
    public static let shuttingDown = ThumbdError(
        status: 503, code: "shutting_down", message: "thumbd is shutting down")
}

enum JSONText {
    /// A JSON string literal for `text`.
    static func quote(_ text: String) -> String {
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
