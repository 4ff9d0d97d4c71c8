import Support
internal import CCurl
import Foundation

/// The destination checks curl asks a transfer for on every hop: the address before each
/// connect, the host and address again before each request. On the loop thread.
extension Transfer {
    /// Called before each connection is made (every redirect hop, every address tried), with
    /// the address curl resolved: opens the socket only for an allowed address.
    func openSocket(_ address: UnsafeMutablePointer<curl_sockaddr>) -> curl_socket_t {
        guard verdict == nil else { return thumbd_curl_socket_bad }  // one refusal refuses the fetch
        var bytes = [UInt8](repeating: 0, count: 16)
        let length = bytes.withUnsafeMutableBufferPointer { thumbd_curl_sockaddr_ip(address, $0.baseAddress) }
        // Through a proxy, the only connection made is to the proxy the operator configured;
        // the origin's name is resolved (and must be policed) there.
        guard let ip = IPAddress(bytes: Array(bytes.prefix(Int(length)))),
              configuration.proxy != nil || configuration.connectCheck.allowsAddress(ip)
        else {
            verdict = .addressRefused
            return thumbd_curl_socket_bad
        }
        if let host = currentHost, !configuration.connectCheck.allowsHost(host) {
            verdict = .hostRefused(host)
            return thumbd_curl_socket_bad
        }
        return thumbd_curl_open_socket(address)
    }

    /// Called after each connection is made or reused (every redirect hop too), before the
    /// request is sent: refuses a host outside the allow list, and checks the address again.
    func connected(to primaryIP: String) -> Int {
        if configuration.proxy == nil, let address = IPAddress(primaryIP), !configuration.connectCheck.allowsAddress(address) {
            verdict = .addressRefused
            return thumbd_curl_prereq_abort
        }
        if let host = currentHost, !configuration.connectCheck.allowsHost(host) {
            verdict = .hostRefused(host)
            return thumbd_curl_prereq_abort
        }
        return thumbd_curl_prereq_ok
    }

    /// The host of the hop being made (curl updates the effective URL before each hop): the
    /// job's own until a redirect changes the URL, without parsing it again for every
    /// transfer (this is asked before each request, on the transfer thread).
    var currentHost: String? {
        withEffectiveURL { url in
            if job.url.withCString({ strcmp($0, url) == 0 }) { return job.host }
            return URLComponents(string: String(cString: url))?.host
        } ?? nil
    }

    var effectiveURL: String? {
        withEffectiveURL { String(cString: $0) }
    }

    /// `body` with curl's effective URL (valid only during the call); nil when curl has none.
    func withEffectiveURL<T>(_ body: (UnsafePointer<CChar>) -> T) -> T? {
        var pointer: UnsafeMutablePointer<CChar>?
        guard thumbd_curl_getinfo_str(easy, CURLINFO_EFFECTIVE_URL, &pointer) == CURLE_OK, let pointer else { return nil }
        return body(pointer)
    }
}
