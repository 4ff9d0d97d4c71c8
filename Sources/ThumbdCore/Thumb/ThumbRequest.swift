import Thumbnailer
import Foundation
import HTTPServer
import Upstream

/// A `/thumb` request, parsed and validated (imgproxy's order: parameters, then destination).
struct ThumbRequest: Sendable {
    var destination: DestinationPolicy.Destination
    var priority: Priority
    var conditions: Conditions
    /// The thumbnail asked for (`auto` resolved from `Accept`), or nil for the original.
    var variant: Variant?

    /// Reads `fallback` (and the asked size, leniently) alone, so that even a bad request
    /// can answer with a placeholder.
    static func wantsPlaceholder(_ request: Request) throws(ThumbdError) -> Placeholder? {
        switch request.query["fallback"] {
        case nil, "", "none": return nil
        case "placeholder":
            let dpr = request.query["dpr"].flatMap { Double($0) }.flatMap { (1...4).contains($0) ? $0 : nil } ?? 1
            func side(_ name: String) -> Int? {
                request.query[name].flatMap { ThumbnailParameters.side($0, dpr: dpr) }
                    .flatMap { $0 <= ThumbnailParameters.maxSide ? $0 : nil }
            }
            return Placeholder(width: side("w"), height: side("h"), takesSVG: Placeholder.takesSVG(request.headers["accept"]))
        case let other?: throw .badRequest(.badParameter, "fallback must be placeholder, not \(other)")
        }
    }

    /// `offered`: the formats `format=auto` may answer, most preferred first.
    init(_ request: Request, policy: DestinationPolicy, avif: Bool, offered: [ImageFormat],
         presets: Presets = Presets()) throws(ThumbdError) {
        // The most common request names the URL alone: no parameter to look for (each lookup
        // hashes its name, on every hit).
        let urlAlone = request.query.count == 1 && request.query["url"] != nil
        if !urlAlone, let parameters = try ThumbnailParameters({ request.query[$0] }, presets: presets) {
            if parameters.format == .fixed(.avif) && !avif {
                throw .badRequest(.badParameter, "format=avif is not available: this libvips cannot encode AVIF")
            }
            variant = try parameters.resolved(accept: request.headers["accept"], offered: offered)
        }
        if !urlAlone, let text = request.query["priority"] {
            guard let priority = Priority(parameter: text) else {
                throw .badRequest(.badParameter, "priority must be high, normal or low, not \(text)")
            }
            self.priority = priority
        } else {
            self.priority = .normal
        }
        self.destination = try policy.validate(request.query["url"])
        self.conditions = Conditions(ifNoneMatch: request.headers["if-none-match"],
                                     ifModifiedSince: request.headers["if-modified-since"])
    }
}

/// A request's validators (RFC 9110 §13.1): `If-None-Match`, else `If-Modified-Since`.
struct Conditions: Sendable {
    var ifNoneMatch: String?
    var ifModifiedSince: String?

    /// Whether the stored answer is what the client already has (304).
    func notModified(etag: String, lastModified: String?) -> Bool {
        if let ifNoneMatch { return ETagMatch.matches(ifNoneMatch, etag) }
        // Only without If-None-Match (§13.2.2), and only against a Last-Modified that was
        // sent: an unparsable date on either side is no match.
        guard let ifModifiedSince, let lastModified, let since = HTTPDate.parse(ifModifiedSince),
              let modified = HTTPDate.parse(lastModified)
        else { return false }
        return modified <= since
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
