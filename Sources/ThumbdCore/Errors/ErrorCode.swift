/// Every error code a client can see, with its HTTP status: the contract's error table in
/// one place (the README's table lists the same). A code has exactly one status.
package enum ErrorCode: String, Sendable, CaseIterable, CustomStringConvertible {
    case missingURL = "missing_url"  // 400: no url parameter
    case malformedURL = "malformed_url"  // 400: not an absolute URL, bad port, control bytes
    case unsupportedScheme = "unsupported_scheme"  // 400: not http or https
    case credentialsInURL = "credentials_in_url"  // 400: user or password in the URL
    case urlTooLong = "url_too_long"  // 400: longer than 4096 bytes
    case badParameter = "bad_parameter"  // 400: a parameter's value is wrong
    case unknownParameter = "unknown_parameter"  // 400: a parameter thumbd does not know (a typo: "did you mean w?")
    case outputTooLarge = "output_too_large"  // 400: w × h over thumbnails.maxOutputPixels
    case malformedJSON = "malformed_json"  // 400: a batch body that is not a JSON object
    case noItems = "no_items"  // 400: a batch without items
    case badFraming = "bad_framing"  // 400: ambiguous request framing (RFC 9112 6.3)
    case missingHost = "missing_host"  // 400: HTTP/1.1 without Host
    case malformedPath = "malformed_path"  // 400: an encoded NUL in the path
    case badSignature = "bad_signature"  // 403: signing.keys are set and sig is missing or wrong
    case destinationNotAllowed = "destination_not_allowed"  // 403: a private, loopback, link-local or multicast destination
    case hostNotAllowed = "host_not_allowed"  // 403: a host outside upstream.allowHosts
    case originNotAllowed = "origin_not_allowed"  // 403: a state-changing request from a foreign Origin
    case notFound = "not_found"  // 404: no such route or resource
    case batchNotFound = "batch_not_found"  // 404: no such batch, or forgotten
    case upstreamNotFound = "upstream_not_found"  // 404: the origin said 404
    case methodNotAllowed = "method_not_allowed"  // 405: a method the route does not take
    case notAcceptable = "not_acceptable"  // 406: format=auto and Accept takes no format thumbd makes
    case requestTimeout = "request_timeout"  // 408: the request did not arrive within its deadline
    case batchEnded = "batch_ended"  // 409: items added to a batch that has ended (open a new one)
    case upstreamGone = "upstream_gone"  // 410: the origin said 410
    case bodyTooLarge = "body_too_large"  // 413: a request body over server.maxBodyBytes
    case tooManyItems = "too_many_items"  // 413: a batch over batches.maxItems
    case tooManyParameters = "too_many_parameters"  // 414: more query parameters than the connection pool holds
    case notAnImage = "not_an_image"  // 415: the origin's bytes are not an image
    case unsupportedMediaType = "unsupported_media_type"  // 415: POST /batches without application/json
    case misdirectedRequest = "misdirected_request"  // 421: a Host thumbd is not reached by (DNS rebinding)
    case imageTooLarge = "image_too_large"  // 422: the source has more pixels than thumbnails.maxSourcePixels
    case resizeTooCostly = "resize_too_costly"  // 422: an intermediate image, the memory or an AVIF encode over its bound (from the header)
    case resizeRefused = "resize_refused"  // 422: libvips refused to resize this valid image with these parameters
    case cancelled = "cancelled"  // 499: nobody waits any more (internal: never sent)
    case internalError = "internal"  // 500: a bug: the server lost track of a response
    case thumbnailFailed = "thumbnail_failed"  // 500: libvips could not encode the thumbnail
    case listenFailed = "listen_failed"  // 500: the listen address cannot be bound (start-up)
    case upstreamStatus = "upstream_status"  // 502: the origin answered another status
    case upstreamUnreachable = "upstream_unreachable"  // 502: no connection to the origin
    case upstreamUnresolvable = "upstream_unresolvable"  // 502: the origin's name does not resolve
    case upstreamTruncated = "upstream_truncated"  // 502: the body was cut short
    case upstreamTooLarge = "upstream_too_large"  // 502: the body is over upstream.maxObjectBytes
    case upstreamBadFraming = "upstream_bad_framing"  // 502: conflicting Content-Length from the origin
    case upstreamBadResponse = "upstream_bad_response"  // 502: the origin's answer is not HTTP
    case tooManyRedirects = "too_many_redirects"  // 502: more than upstream.maxRedirects
    case badRedirect = "bad_redirect"  // 502: a redirect to another scheme
    case upstreamFailed = "upstream_failed"  // 502: any other transfer failure
    case queueFull = "queue_full"  // 503: more than upstream.maxQueued fetches waiting
    case tooManyBatches = "too_many_batches"  // 503: batches.maxOpen batches running
    case tooManyConnections = "too_many_connections"  // 503: server.maxConnections open
    case storeUnavailable = "store_unavailable"  // 503: the cache cannot be written (a full disk)
    case shuttingDown = "shutting_down"  // 503: the daemon is stopping
    case unhealthy = "unhealthy"  // 503: the cache database cannot be read
    case resizeTimeout = "resize_timeout"  // 503: one resize ran past thumbnails.timeLimitSeconds
    case busy = "busy"  // 503: thumbnails.maxQueued resizes already wait, or a fetch waited out its time for memory (Retry-After)
    case upstreamTimeout = "upstream_timeout"  // 504: connect, total or low-speed timeout

    package var status: Int {
        switch self {
        case .missingURL, .malformedURL, .unsupportedScheme, .credentialsInURL, .urlTooLong, .badParameter, .unknownParameter, .outputTooLarge, .malformedJSON, .noItems, .badFraming, .missingHost, .malformedPath: 400
        case .badSignature, .destinationNotAllowed, .hostNotAllowed, .originNotAllowed: 403
        case .notFound, .batchNotFound, .upstreamNotFound: 404
        case .methodNotAllowed: 405
        case .notAcceptable: 406
        case .batchEnded: 409
        case .requestTimeout: 408
        case .upstreamGone: 410
        case .bodyTooLarge, .tooManyItems: 413
        case .tooManyParameters: 414
        case .notAnImage, .unsupportedMediaType: 415
        case .misdirectedRequest: 421
        case .imageTooLarge, .resizeTooCostly, .resizeRefused: 422
        case .cancelled: 499
        case .internalError, .listenFailed, .thumbnailFailed: 500
        case .upstreamStatus, .upstreamUnreachable, .upstreamUnresolvable, .upstreamTruncated, .upstreamTooLarge, .upstreamBadFraming, .upstreamBadResponse, .tooManyRedirects, .badRedirect, .upstreamFailed: 502
        case .queueFull, .tooManyBatches, .tooManyConnections, .storeUnavailable, .shuttingDown, .unhealthy, .resizeTimeout, .busy: 503
        case .upstreamTimeout: 504
        }
    }

    package var description: String { rawValue }
}
