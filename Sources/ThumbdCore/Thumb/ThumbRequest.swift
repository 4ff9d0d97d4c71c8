import Foundation
import HTTPServer
import Upstream

/// A `/thumb` request, parsed and validated (imgproxy's order: parameters, then destination).
struct ThumbRequest: Sendable {
    var destination: DestinationPolicy.Destination
    var priority: Priority
    var ifNoneMatch: String?

    /// Reads `fallback` alone, so that even a bad request can answer with a placeholder.
    static func wantsPlaceholder(_ request: Request) throws(ThumbdError) -> Bool {
        switch request.query["fallback"] {
        case nil, "", "none": return false
        case "placeholder": return true
        case let other?: throw .badRequest(.badParameter, "fallback must be placeholder, not \(other)")
        }
    }

    /// Resizing arrives with libvips; until then these are refused rather than ignored, so a
    /// client never gets a full-size original where it asked for a 64-pixel thumbnail.
    static let thumbnailParameters = ["w", "h", "fit", "format", "q"]

    init(_ request: Request, policy: DestinationPolicy) throws(ThumbdError) {
        if let name = Self.thumbnailParameters.first(where: { request.query[$0] != nil }) {
            throw .badRequest(.unsupportedParameter, "\(name): resizing (w, h, fit, format, q) is not available yet")
        }
        if let text = request.query["priority"] {
            guard let priority = Priority(parameter: text) else {
                throw .badRequest(.badParameter, "priority must be high, normal or low, not \(text)")
            }
            self.priority = priority
        } else {
            self.priority = .normal
        }
        self.destination = try policy.validate(request.query["url"])
        self.ifNoneMatch = request.headers["if-none-match"]
    }
}

enum ETagMatch {
    /// `If-None-Match` uses the weak comparison (RFC 9110 §13.1.2): `W/` is ignored.
    static func matches(_ header: String, _ etag: String) -> Bool {
        let candidates = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        return candidates.contains { candidate in
            candidate == "*" || (candidate.hasPrefix("W/") ? String(candidate.dropFirst(2)) : candidate) == etag
        }
    }
}
