import HTTPServer
import Thumbnailer
import Upstream

/// The one table from the lower layers' errors to the contract's codes. The layers say what
/// happened in their own terms; only here does it become a status, a code and the message
/// a client reads. No lower layer's internal text reaches a client except curl's summary
/// of an otherwise unclassified transfer failure.
extension ThumbdError {
    package init(_ error: UpstreamError) {
        switch error {
        case .status(let status) where status == 404 || status == 410: self = .upstreamStatus(status)
        case .status(let status): self.init(.upstreamStatus, "the origin answered \(status)")
        case .tooLarge(let limit): self.init(.upstreamTooLarge, "the image is larger than \(limit) bytes")
        case .badFraming: self.init(.upstreamBadFraming, "the origin sent conflicting or invalid Content-Length headers")
        case .addressRefused: self.init(.destinationNotAllowed, "the origin resolved to a private or local address (upstream.allowPrivateNetworks: true allows it)")
        case .hostRefused(let host): self.init(.hostNotAllowed, "a redirect led to \(host), which is not in the allow list")
        case .timeout: self = .upstreamTimeout
        case .tooManyRedirects(let limit): self.init(.tooManyRedirects, "more than \(limit) redirects")
        case .badRedirect: self.init(.badRedirect, "a redirect led to a scheme other than http or https")
        case .truncated(let why): self.init(.upstreamTruncated, why)
        case .unresolvable: self.init(.upstreamUnresolvable, "the origin's host name does not resolve")
        case .unreachable: self.init(.upstreamUnreachable, "could not connect to the origin")
        case .badResponse: self.init(.upstreamBadResponse, "the origin's answer is not valid HTTP")
        case .failed(let curlSays): self.init(.upstreamFailed, curlSays)
        case .cancelled: self = .cancelled
        case .shuttingDown: self = .shuttingDown
        case .queueFull: self.init(.queueFull, "too many fetches are waiting; try again shortly")
        case .waitedForMemory:
            self.init(.busy, "downloads held all of upstream.maxBufferedBytes until this fetch ran out of time; try again shortly")
        }
    }

    package init(_ refusal: ServerRefusal) {
        switch refusal {
        case .tooManyConnections: self.init(.tooManyConnections, "thumbd holds as many connections as it may")
        case .shuttingDown: self = .shuttingDown
        case .tooManyParameters: self.init(.tooManyParameters, "the query has too many parameters")
        case .nulInPath: self.init(.malformedPath, "the path contains an encoded NUL byte")
        case .requestTimeout: self.init(.requestTimeout, "the request did not arrive in time")
        case .badFraming(let rule): self.init(.badFraming, rule)
        case .missingHost: self.init(.missingHost, "an HTTP/1.1 request needs a Host header")
        case .bodyTooLarge(let limit): self.init(.bodyTooLarge, "the request body is larger than \(limit) bytes")
        case .noResponse: self.init(.internalError, "no response")
        }
    }

    package init(_ error: ThumbnailerError) {
        switch error {
        case .notAnImage, .unsupportedFormat: self = .notAnImage
        case .tooCostly(let reason): self.init(.resizeTooCostly, reason)
        case .cropOutside(let crop, let width, let height):
            self.init(.badParameter, "crop=\(crop.left),\(crop.top),\(crop.width),\(crop.height) lies outside the "
                          + "\(width)×\(height) image")
        case .resizeRefused: self.init(.resizeRefused, "libvips refused to resize this image with these parameters")
        case .cancelled: self = .cancelled
        case .tooManyPixels(let width, let height, let limit):
            self.init(.imageTooLarge, "the image is \(width)×\(height) pixels; thumbnails are made of at most \(limit)")
        case .outputTooLarge(let width, let height, let limit):
            self.init(.outputTooLarge, "a \(width)×\(height) thumbnail is more than \(limit) pixels")
        case .timedOut(let limit): self.init(.resizeTimeout, "the resize took longer than \(limit)")
        case .failed: self.init(.thumbnailFailed, "the thumbnail could not be encoded")
        }
    }

    package init(_ error: HTTPServerError) {
        self.init(.listenFailed, error.description)
    }
}

extension Response {
    /// The contract's error answer: the JSON body, never cached.
    package static func error(_ error: ThumbdError, headers: [(String, String)] = []) -> Response {
        Response(
            status: error.status,
            headers: [("Content-Type", "application/json"), ("Cache-Control", "no-store"),
                      ("X-Thumbd-Error", error.code.rawValue)] + headers,
            body: error.jsonBody)
    }
}
