import Support
internal import CCurl
import Foundation

/// Owns one curl easy handle and the bytes of one fetch. Confined to the transfer loop's
/// thread; curl calls back into it through the context pointer (`Unmanaged`, unretained:
/// the loop keeps the `Transfer` alive for as long as the handle is in the multi handle).
final class Transfer {
    let easy: UnsafeMutableRawPointer
    let job: FetchJob
    let configuration: TransferLoop.Configuration
    private var body = Bytes.Builder()
    /// The memory the body holds, charged to the loops' download budget before it grows.
    private let charge: DownloadCharge
    /// Paused until the budget has room: the loop resumes it (`resume`).
    private(set) var waitsForMemory = false
    /// When the transfer last paused for memory, and how long it has waited before.
    private var pausedAt: ContinuousClock.Instant?
    private var pausedBefore: Duration = .zero
    private let budget: DownloadBudget
    /// Body bytes received so far.
    var bytesReceived: Int { body.count }
    private var headers = OriginHeaders()
    /// The body has begun: later header lines are trailers, and are ignored.
    private var statusChecked = false
    /// Set by a callback that stopped the transfer on purpose; wins over curl's error code.
    var verdict: UpstreamError?
    private var lastProgress = FetchProgress(received: 0, total: nil)
    private var lastProgressTime: ContinuousClock.Instant = .now
    /// The request's extra header lines (the validators), owned here and freed in `deinit`.
    private var requestHeaders: UnsafeMutablePointer<curl_slist>?

    /// A second attempt, on a new connection (see `TransferLoop`'s retry).
    let isRetry: Bool

    init(job: FetchJob, configuration: TransferLoop.Configuration, budget: DownloadBudget, isRetry: Bool = false) {
        guard let easy = curl_easy_init() else { fatalError("curl_easy_init failed: out of memory") }
        self.easy = easy
        self.job = job
        self.configuration = configuration
        self.budget = budget
        self.charge = DownloadCharge(budget: budget)
        self.isRetry = isRetry
        configure()
    }

    /// Whether the transfer ran on a connection kept from an earlier one (curl made none).
    var reusedConnection: Bool {
        var made = 0
        _ = thumbd_curl_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &made)
        return made == 0
    }

    deinit {
        if waitsForMemory { budget.paused(-1) }
        curl_easy_cleanup(easy)
        curl_slist_free_all(requestHeaders)  // after the handle that points at it
    }

    static func from(_ pointer: UnsafeMutableRawPointer?) -> Transfer {
        Unmanaged<Transfer>.fromOpaque(pointer!).takeUnretainedValue()
    }

    private func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let c = configuration
        func long(_ option: CURLoption, _ value: Int) { Curl.check(thumbd_curl_setopt_long(easy, option, value), "\(option)") }
        func string(_ option: CURLoption, _ value: String) { Curl.check(thumbd_curl_setopt_str(easy, option, value), "\(option)") }
        string(CURLOPT_URL, job.url)
        long(CURLOPT_NOSIGNAL, 1)
        if isRetry { long(CURLOPT_FRESH_CONNECT, 1) }
        string(CURLOPT_PROTOCOLS_STR, "http,https")
        string(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        long(CURLOPT_FOLLOWLOCATION, 1)
        long(CURLOPT_MAXREDIRS, c.maxRedirects)
        long(CURLOPT_CONNECTTIMEOUT_MS, c.connectTimeoutMilliseconds)
        long(CURLOPT_TIMEOUT_MS, c.timeoutMilliseconds)
        long(CURLOPT_LOW_SPEED_LIMIT, c.lowSpeedBytesPerSecond)
        long(CURLOPT_LOW_SPEED_TIME, c.lowSpeedSeconds)
        Curl.check(thumbd_curl_setopt_off(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(c.maxObjectBytes)), "MAXFILESIZE")
        long(CURLOPT_HTTP_VERSION, thumbd_curl_http_version_2tls)
        // Over TLS the origin may speak HTTP/2: wait for a connection being set up to say so
        // (ALPN) rather than open one per transfer of a burst; they then share it. Plain
        // http:// is always HTTP/1.1 here, and never waits.
        if job.url.hasPrefix("https://") { long(CURLOPT_PIPEWAIT, 1) }
        if let userAgent = c.userAgent { string(CURLOPT_USERAGENT, userAgent) }
        string(CURLOPT_ACCEPT_ENCODING, "identity")
        if let caFile = c.caFile { string(CURLOPT_CAINFO, caFile) }
        // Only the configured proxy, never one from the environment: curl would otherwise
        // read http_proxy, ALL_PROXY and no_proxy on every transfer, and send fetches to a
        // proxy the destination policy never sees past (it would check the proxy's address,
        // not the origin's). "" turns that lookup off.
        string(CURLOPT_PROXY, c.proxy ?? "")
        if let validators = job.validators {
            // Values were validated when they arrived (OriginHeaders): no CR/LF can get in.
            if let etag = validators.etag { requestHeaders = curl_slist_append(requestHeaders, "If-None-Match: \(etag)") }
            if let date = validators.lastModified {
                requestHeaders = curl_slist_append(requestHeaders, "If-Modified-Since: \(date)")
            }
            Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(requestHeaders)), "HTTPHEADER")
        }
        long(CURLOPT_NOPROGRESS, 0)
        Curl.check(thumbd_curl_setopt_datafn(easy, CURLOPT_WRITEFUNCTION, { data, size, count, user in
            Transfer.from(user).receive(data, size * count)
        }), "WRITEFUNCTION")
        Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_WRITEDATA, me), "WRITEDATA")
        Curl.check(thumbd_curl_setopt_datafn(easy, CURLOPT_HEADERFUNCTION, { data, size, count, user in
            Transfer.from(user).header(data, size * count)
        }), "HEADERFUNCTION")
        Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_HEADERDATA, me), "HEADERDATA")
        Curl.check(thumbd_curl_setopt_xferinfofn(easy, { user, total, now, _, _ in
            Transfer.from(user).progress(received: Int64(now), total: Int64(total))
        }), "XFERINFOFUNCTION")
        Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_XFERINFODATA, me), "XFERINFODATA")
        // The destination check proper: every address curl is about to connect to, on every
        // hop, before a socket exists. Refusing here (rather than after the connect) means
        // the answer is the same whether the port is open, closed or filtered: thumbd can't
        // be used to scan loopback or the LAN.
        Curl.check(thumbd_curl_setopt_opensocketfn(easy, { user, _, address in
            guard let address else { return thumbd_curl_socket_bad }
            return Transfer.from(user).openSocket(address)
        }), "OPENSOCKETFUNCTION")
        Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_OPENSOCKETDATA, me), "OPENSOCKETDATA")
        Curl.check(thumbd_curl_setopt_prereqfn(easy, { user, primaryIP, _, _, _ in
            Int32(Transfer.from(user).connected(to: primaryIP.map { String(cString: $0) } ?? ""))
        }), "PREREQFUNCTION")
        Curl.check(thumbd_curl_setopt_ptr(easy, CURLOPT_PREREQDATA, me), "PREREQDATA")
    }

    // MARK: Callbacks (loop thread)

    private func receive(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        if !statusChecked {
            statusChecked = true
            let status = responseCode
            if status != 200 {
                verdict = .status(status)
                return 0  // stop: we do not want this body
            }
        }
        guard body.count + count <= configuration.maxObjectBytes else {
            verdict = .tooLarge(limit: configuration.maxObjectBytes)
            return 0
        }
        if let data, count > 0 {
            // The room the body will hold once these bytes are in: all of a Content-Length at
            // once, else the builder's next step. Charged first; no room pauses the transfer.
            // Never past maxObjectBytes (checked above for the bytes themselves).
            var room = min(body.capacity(appending: count), configuration.maxObjectBytes)
            if let length = headers.contentLength, length <= configuration.maxObjectBytes, body.count + count <= length {
                room = max(body.capacity, length)
            }
            guard charge.grow(to: room) else {
                waitsForMemory = true
                pausedAt = .now
                budget.paused(1)
                return Int(thumbd_curl_writefunc_pause)  // curl keeps these bytes and offers them again
            }
            body.reserve(room)
            let bytes = UnsafeRawBufferPointer(start: data, count: count)
            body.append(bytes)
            body.withUnsafeBytes { job.publishBody(bytes, soFar: $0) }
        }
        return count
    }

    /// Lets a transfer paused for memory go on; curl offers the bytes it kept again (during
    /// this call or the loop's next turn), and the transfer may pause once more.
    func resume() {
        guard waitsForMemory else { return }
        waitsForMemory = false
        if let pausedAt { pausedBefore += .now - pausedAt }
        pausedAt = nil
        budget.paused(-1)
        _ = thumbd_curl_resume(easy)
    }

    private func header(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data, !statusChecked else { return count }  // after the body began: a trailer
        let line = UnsafeRawBufferPointer(start: data, count: count)
        if line.starts(with: "HTTP/".utf8) {
            headers.reset()  // a new response (after a redirect or a 100): forget the old one's
        } else if !headers.take(line) {
            verdict = .badFraming
            return 0  // stops the transfer
        }
        return count
    }

    private func progress(received: Int64, total: Int64) -> Int32 {
        let next = FetchProgress(received: received, total: total > 0 ? total : nil)
        guard next != lastProgress, verdict == nil else { return 0 }
        // Only the image's own bytes count: not a redirect's or an error page's.
        if received > 0 || total > 0 {
            guard responseCode == 200 else { return 0 }
        }
        let now = ContinuousClock.now
        // A few updates a second at most, plus one as soon as the total becomes known.
        if now - lastProgressTime >= .milliseconds(100) || (lastProgress.total == nil && next.total != nil) {
            lastProgress = next
            lastProgressTime = now
            job.publishProgress(next)
        }
        return 0
    }

    // MARK: Outcome

    private var responseCode: Int {
        var code = 0
        _ = thumbd_curl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// Turns curl's result code into the fetch's outcome.
    func outcome(_ code: CURLcode) -> Result<UpstreamResponse, UpstreamError> {
        if let verdict { return .failure(verdict) }
        switch code {
        case CURLE_OK:
            let status = responseCode
            if status == 304, job.validators != nil {
                // The stored copy is current: its freshness is renewed from these headers.
                return .success(UpstreamResponse(
                    status: 304, body: .empty, etag: headers.etag, lastModified: headers.lastModified,
                    cacheControl: headers.cacheControl, expires: headers.expires, date: headers.date))
            }
            guard status == 200 else { return .failure(.status(status)) }
            if lastProgress.received != Int64(body.count) {
                job.publishProgress(FetchProgress(received: Int64(body.count), total: Int64(body.count)))
            }
            return .success(UpstreamResponse(
                status: 200, body: body.take(keeper: charge, trimmed: { charge.shrink(to: $0) }), etag: headers.etag,
                lastModified: headers.lastModified, cacheControl: headers.cacheControl,
                expires: headers.expires, date: headers.date))
        case CURLE_OPERATION_TIMEDOUT:
            // Paused when the time ran out, or for half of it: the daemon was busy, not the origin slow.
            let paused = pausedBefore + (pausedAt.map { .now - $0 } ?? .zero)
            if waitsForMemory || paused * 2 >= .milliseconds(configuration.timeoutMilliseconds) {
                return .failure(.waitedForMemory)
            }
            return .failure(.timeout)
        case CURLE_TOO_MANY_REDIRECTS:
            return .failure(.tooManyRedirects(limit: configuration.maxRedirects))
        case CURLE_RECV_ERROR where statusChecked:
            // After the body began: a reset or a broken chunked encoding cut it short.
            return .failure(.truncated("the body was cut short: \(String(cString: curl_easy_strerror(code)))"))
        case CURLE_PARTIAL_FILE:
            return .failure(.truncated("the origin closed the connection before the end of the body"))
        case CURLE_FILESIZE_EXCEEDED:
            return .failure(.tooLarge(limit: configuration.maxObjectBytes))
        case CURLE_COULDNT_RESOLVE_HOST:
            return .failure(.unresolvable)
        case CURLE_COULDNT_CONNECT:
            return .failure(.unreachable)
        case CURLE_UNSUPPORTED_PROTOCOL where !(effectiveURL.map { $0.hasPrefix("http://") || $0.hasPrefix("https://") } ?? true):
            return .failure(.badRedirect)
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY:
            // Not HTTP (curl refuses HTTP/0.9), or a status line it cannot read.
            return .failure(.badResponse)
        default:
            return .failure(.failed(String(cString: curl_easy_strerror(code))))
        }
    }
}

@available(*, unavailable)
extension Transfer: Sendable {}
