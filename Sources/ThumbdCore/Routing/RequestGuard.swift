import Foundation
import HTTPServer
import Support
import Synchronization

/// What a web page in the user's browser must not be able to do through thumbd, checked
/// before any route runs. thumbd listens on loopback, which every page can reach:
///
/// - **DNS rebinding**: a page on `attacker.example` whose name later resolves to
///   127.0.0.1 sends `Host: attacker.example`. Only the names thumbd is reached by are
///   answered (loopback names, the listen address, `server.allowedHosts`); others get 421.
/// - **Cross-site requests**: a page can POST or DELETE to loopback without a CORS
///   preflight. A state-changing request that carries a foreign `Origin` is 403 unless the
///   origin is in `server.allowedOrigins`; `POST /batches` needs `Content-Type:
///   application/json` (which a page cannot send cross-site without a preflight), else 415.
/// - **CORS** for the allowed origins: preflights are answered, and responses carry
///   `Access-Control-Allow-Origin` for them.
struct RequestGuard: Sendable {
    /// The names and origins, shared by every copy of this guard: a reload (SIGHUP) replaces them.
    private let rules: Shared
    private let listenHost: String

    /// Lower-case host names (no port, no brackets) requests may name, as bytes: a handful,
    /// compared in turn with the name a request's `Host` spells, which is neither copied nor
    /// hashed (that was 1.6% of a hot hit's instructions); `anyHost` means any.
    private struct Rules {
        var hosts: [[UInt8]]
        var anyHost: Bool
        var origins: Set<String>
    }

    private final class Shared: Sendable {
        let current: Mutex<Rules>
        init(_ rules: Rules) { current = Mutex(rules) }
    }

    static let loopbackNames = ["localhost", "127.0.0.1", "::1"]

    init(listenHost: String, allowedHosts: [String], allowedOrigins: [String]) {
        self.listenHost = listenHost
        rules = Shared(Self.rules(listenHost: listenHost, allowedHosts: allowedHosts, allowedOrigins: allowedOrigins))
    }

    private static func rules(listenHost: String, allowedHosts: [String], allowedOrigins: [String]) -> Rules {
        var hosts: [[UInt8]] = []
        for name in (loopbackNames + [listenHost] + allowedHosts).map({ Array(hostName($0).utf8) }) where !hosts.contains(name) {
            hosts.append(name)
        }
        return Rules(hosts: hosts, anyHost: allowedHosts.contains("*"), origins: Set(allowedOrigins.map { $0.lowercased() }))
    }

    /// Replaces the allowed names and origins of this guard and of every copy of it.
    func replace(allowedHosts: [String], allowedOrigins: [String]) {
        let new = Self.rules(listenHost: listenHost, allowedHosts: allowedHosts, allowedOrigins: allowedOrigins)
        rules.current.withLock { $0 = new }
    }

    /// One lock per question: `allows(host:)` is asked of every request.
    private func allows(host: String) -> Bool {
        var host = host
        return host.withUTF8 { bytes in
            let name = UnsafeBufferPointer(rebasing: bytes[Self.nameRange(bytes)])
            return rules.current.withLock { rules in
                rules.anyHost || rules.hosts.contains { $0.equalsIgnoringASCIICase(name) }
            }
        }
    }

    private var origins: Set<String> { rules.current.withLock { $0.origins } }

    /// The verdict for a request: nil to go on, else the response to send.
    func check(_ request: Request) -> Response? {
        guard let host = request.headers["host"] else { return nil }  // HTTP/1.0 (the server refuses 1.1 without)
        guard allows(host: host) else {
            return .error(ThumbdError(.misdirectedRequest, "thumbd does not answer for this host name; add it to server.allowedHosts"))
        }
        let origin = request.headers["origin"]
        if request.method == "OPTIONS" {
            return preflight(origin: origin, host: host)
        }
        if let origin, !isSameOrAllowed(origin, host: host), Self.changesState(request.method) {
            return .error(.forbidden(.originNotAllowed,
                                     "requests that change state are refused from other origins; add it to server.allowedOrigins"))
        }
        if request.method == "POST", request.path == "/batches" || Self.addsItems(request.path),
           !Self.isJSON(request.headers["content-type"]) {
            return .error(ThumbdError(.unsupportedMediaType, "POST \(request.path) takes Content-Type: application/json"))
        }
        return nil
    }

    /// `POST /batches/<id>/items`: a body of items, as `POST /batches` takes.
    static func addsItems(_ path: String) -> Bool {
        path.hasPrefix("/batches/") && path.hasSuffix("/items") && path.utf8.count > "/batches//items".utf8.count
    }

    /// Headers every response to this request carries: CORS for an allowed foreign origin.
    func corsHeaders(_ request: Request) -> [(String, String)] {
        guard let origin = request.headers["origin"], origins.contains(origin.lowercased()) else { return [] }
        return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
    }

    private func preflight(origin: String?, host: String) -> Response {
        let allow = ("Allow", "GET, HEAD, POST, DELETE, OPTIONS")
        guard let origin else { return Response(status: 204, headers: [allow]) }
        guard origins.contains(origin.lowercased()) || isSameOrigin(origin, host: host) else {
            return .error(.forbidden(.originNotAllowed, "this origin may not make cross-origin requests; see server.allowedOrigins"))
        }
        return Response(status: 204, headers: [
            allow,
            ("Access-Control-Allow-Origin", origin),
            ("Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE"),
            ("Access-Control-Allow-Headers", "Content-Type, Last-Event-ID, If-None-Match"),
            ("Access-Control-Max-Age", "600"),
            ("Vary", "Origin"),
        ])
    }

    private func isSameOrAllowed(_ origin: String, host: String) -> Bool {
        origins.contains(origin.lowercased()) || isSameOrigin(origin, host: host)
    }

    /// The page thumbd serves itself (`GET /`) posts with its own origin.
    private func isSameOrigin(_ origin: String, host: String) -> Bool {
        origin.lowercased() == "http://" + host.lowercased()
    }

    static func changesState(_ method: String) -> Bool {
        method != "GET" && method != "HEAD" && method != "OPTIONS"
    }

    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
        return mediaType.trimmingCharacters(in: .whitespaces).lowercased() == "application/json"
    }

    /// The name a `Host` header (or a configured name) gives: `name:port` → `name`,
    /// `[v6]:port` and `[v6]` → `v6`, ASCII lower-case, without a trailing dot. One pass over
    /// the bytes: it runs on every request, hits included.
    static func hostName(_ host: String) -> String {
        var host = host
        return host.withUTF8 { bytes -> String in
            let name = UnsafeBufferPointer(rebasing: bytes[nameRange(bytes)])
            guard name.contains(where: { $0.asciiLowercased != $0 }) else { return String(decoding: name, as: UTF8.self) }
            return String(decoding: name.map(\.asciiLowercased), as: UTF8.self)
        }
    }

    /// Where the name lies in a `Host` value: inside the brackets of an IPv6 literal, before
    /// the port, without a trailing dot.
    private static func nameRange(_ bytes: UnsafeBufferPointer<UInt8>) -> Range<Int> {
        let colon = UInt8(ascii: ":")
        var start = 0
        var end = bytes.count
        if end > 0, bytes[0] == UInt8(ascii: "["), let close = bytes.firstIndex(of: UInt8(ascii: "]")) {
            start = 1
            end = close
        } else if let first = bytes.firstIndex(of: colon), bytes.lastIndex(of: colon) == first {
            end = first  // one colon: a port (a bare IPv6 address has several)
        }
        if end > start, bytes[end - 1] == UInt8(ascii: ".") { end -= 1 }
        return start..<end
    }
}
