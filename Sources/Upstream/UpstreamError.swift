import Support

/// Why a fetch did not produce an image body, in the upstream's own terms. The product
/// decides what a client is told (ThumbdCore's error table).
public enum UpstreamError: Error, Sendable, Equatable {
    /// The origin answered a status other than 200 (the final one, after redirects).
    case status(Int)
    /// The body is larger than `maxObjectBytes` (announced or received).
    case tooLarge(limit: Int)
    /// Conflicting or invalid Content-Length headers.
    case badFraming
    /// The connect check refused the address curl was about to connect to.
    case addressRefused
    /// The connect check refused the host of a hop (a redirect outside the allow list).
    case hostRefused(String)
    /// The whole transfer, or its connect, took longer than allowed.
    case timeout
    case tooManyRedirects(limit: Int)
    /// A redirect to a scheme other than http or https.
    case badRedirect
    /// The body ended before its announced end.
    case truncated(String)
    case unresolvable
    case unreachable
    /// Not HTTP, or a status line curl cannot read.
    case badResponse
    /// Any other transport failure, with curl's own words.
    case failed(String)
    /// `TransferLoop.cancel` stopped it.
    case cancelled
    /// `TransferLoop.shutdown` stopped it.
    case shuttingDown
    /// The queue was full; nothing was started.
    case queueFull
    /// The transfer ran out of time waiting for memory: downloaded bodies held all of
    /// `maxBufferedBytes` (the daemon is busy, not the origin slow).
    case waitedForMemory
}
