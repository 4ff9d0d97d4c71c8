import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// A running thumbd, from a Swift app or tool on Linux, macOS or iOS: images, batches as
/// typed events, and the daemon's admin calls. Built on AsyncHTTPClient (SwiftNIO): nothing
/// blocks a thread of the cooperative pool, and the server may be named by host name
/// (`http://thumbd:8080` in a container network: add that name to the daemon's
/// `server.allowedHosts`).
///
///     let thumbd = DaemonClient(server: "http://127.0.0.1:8080")
///     let image = try await thumbd.image("https://example.org/a.jpg", .init(w: 256, h: 256, fit: "cover"))
///     for try await event in thumbd.batch(["https://example.org/a.jpg", "https://example.org/b.png"]) { … }
public struct DaemonClient: Sendable {
    /// `http://HOST:PORT`, without a trailing slash.
    public let server: String
    let http: HTTPClient
    /// How long one request may take (an event stream: how long it may stay silent, which
    /// its keepalives prevent).
    public var timeout: TimeAmount

    /// `http` defaults to AsyncHTTPClient's shared client (never shut down by us).
    public init(server: String = "http://127.0.0.1:8080", http: HTTPClient = .shared, timeout: TimeAmount = .seconds(60)) {
        self.server = server.hasSuffix("/") ? String(server.dropLast()) : server
        self.http = http
        self.timeout = timeout
    }

    // MARK: Images

    /// `GET /thumb`: the image (or its thumbnail) and how it was served. A refusal or a
    /// failure of the origin throws `DaemonError` with thumbd's status, code and message.
    public func image(_ url: String, _ options: ThumbnailOptions = ThumbnailOptions()) async throws -> Image {
        let query = [("url", url)] + options.query
        let response = try await send("GET", "/thumb?" + Self.encode(query))
        let body = try await response.body.collect(upTo: Self.maxImageBytes)
        guard response.status == .ok else { throw DaemonError(status: Int(response.status.code), body: body) }
        return Image(bytes: Array(body.readableBytesView), contentType: response.headers.first(name: "Content-Type"),
                     cache: response.headers.first(name: "X-Thumbd-Cache"), etag: response.headers.first(name: "ETag"))
    }

    // MARK: Batches

    /// A batch of these items, as an `AsyncSequence` of typed events: posted when iteration
    /// starts, followed to its `end` (reconnecting with `Last-Event-ID` when the stream drops,
    /// as EventSource does, a daemon restart included). Cancelling the iterating task, or
    /// leaving the loop before `end`, cancels the batch on the daemon.
    public func batch(_ items: [BatchItem], _ options: BatchOptions = BatchOptions()) -> BatchEvents {
        BatchEvents(client: self, items: items, options: options)
    }

    /// A batch of these URLs.
    public func batch(_ urls: [String], _ options: BatchOptions = BatchOptions()) -> BatchEvents {
        batch(urls.map { BatchItem(url: $0) }, options)
    }

    /// `POST /batches/<id>/focus`: these items are on screen now; they are fetched and made first.
    public func focus(batch id: String, _ indices: [Int]) async throws {
        try await expect(204, "POST", "/batches/\(id)/focus", json: try JSONEncoder().encode(["items": indices]))
    }

    /// `DELETE /batches/<id>`: what is still queued or in flight is cancelled.
    public func cancel(batch id: String) async throws {
        try await expect(200, "DELETE", "/batches/\(id)")
    }

    // MARK: Operating

    /// `GET /stats`, as the daemon's JSON (`thumbd stats --json` prints it).
    public func stats() async throws -> [UInt8] {
        try await expect(200, "GET", "/stats")
    }

    /// `DELETE /cache?url=…` (one URL and its variants) or `DELETE /cache` (everything):
    /// how many objects were removed.
    public func purge(_ url: String?) async throws -> Int {
        let body = try await expect(200, "DELETE", url.map { "/cache?" + Self.encode([("url", $0)]) } ?? "/cache")
        struct Purged: Decodable { var purged: Int }
        return try JSONDecoder().decode(Purged.self, from: Data(body)).purged
    }

    /// `GET /healthz`: the status and the body (`{"status":"ok"}`, or why not).
    public func health() async throws -> (status: Int, body: String) {
        let response = try await send("GET", "/healthz")
        let body = try await response.body.collect(upTo: 1 << 16)
        return (Int(response.status.code), String(buffer: body))
    }

    // MARK: Requests

    static let maxImageBytes = 256 << 20

    func send(_ method: String, _ target: String, json: Data? = nil, headers: [(String, String)] = [],
              timeout: TimeAmount? = nil) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: server + target)
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: json))
        }
        do {
            return try await http.execute(request, timeout: timeout ?? self.timeout)
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            // Refused, reset, timed out, a name that does not resolve: the daemon is not there.
            throw DaemonError(status: 0, error: "unreachable", message: "thumbd is not reachable at \(server): \(error)")
        }
    }

    /// The body of an answer with `status`; any other throws thumbd's error.
    @discardableResult
    func expect(_ status: Int, _ method: String, _ target: String, json: Data? = nil) async throws -> [UInt8] {
        let response = try await send(method, target, json: json)
        let body = try await response.body.collect(upTo: 16 << 20)
        guard Int(response.status.code) == status else { throw DaemonError(status: Int(response.status.code), body: body) }
        return Array(body.readableBytesView)
    }

    /// `name=value&…`, each value percent-encoded (only `A-Za-z0-9-._~` kept).
    static func encode(_ pairs: [(String, String)]) -> String {
        let kept = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return pairs.map { "\($0)=\($1.addingPercentEncoding(withAllowedCharacters: kept) ?? $1)" }.joined(separator: "&")
    }
}

/// An image as thumbd served it.
public struct Image: Sendable {
    public let bytes: [UInt8]
    public let contentType: String?
    /// `hit`, `miss`, `coalesced`, `stale` or `revalidated`.
    public let cache: String?
    public let etag: String?
}

/// thumbd's refusal or failure: the HTTP status (0: not reachable), its code and message.
public struct DaemonError: Error, CustomStringConvertible, Sendable {
    public let status: Int
    public let error: String
    public let message: String

    public init(status: Int, error: String, message: String) {
        self.status = status
        self.error = error
        self.message = message
    }

    init(status: Int, body: ByteBuffer) {
        struct Body: Decodable { var error: String; var message: String }
        let decoded = try? JSONDecoder().decode(Body.self, from: Data(body.readableBytesView))
        self.init(status: status, error: decoded?.error ?? "http_\(status)",
                  message: decoded?.message ?? String(buffer: body))
    }

    public var description: String { "\(status) \(error): \(message)" }
}

/// The thumbnail parameters (`/thumb`'s, a batch's or an item's); nil ones are not sent.
public struct ThumbnailOptions: Sendable, Hashable {
    public var w: Int?
    public var h: Int?
    public var dpr: Double?
    public var fit: String?
    public var format: String?
    public var q: Int?
    public var preset: String?
    /// The others by their query names (`gravity`, `crop`, `bg`, `blur`, `sharpen`, `rotate`, …).
    public var more: [String: String]
    /// `/thumb` only: `high`, `normal` or `low`; and the signature, made by your server.
    public var priority: String?
    public var sig: String?

    public init(w: Int? = nil, h: Int? = nil, dpr: Double? = nil, fit: String? = nil, format: String? = nil, q: Int? = nil,
                preset: String? = nil, more: [String: String] = [:], priority: String? = nil, sig: String? = nil) {
        self.w = w; self.h = h; self.dpr = dpr; self.fit = fit; self.format = format; self.q = q
        self.preset = preset; self.more = more; self.priority = priority; self.sig = sig
    }

    /// The parameters by name, in a stable order.
    var parameters: [(String, String)] {
        let named: [(String, String?)] = [("w", w.map(String.init)), ("h", h.map(String.init)), ("dpr", dpr.map { String($0) }),
                                          ("fit", fit), ("format", format), ("q", q.map(String.init)), ("preset", preset)]
        return named.compactMap { name, value in value.map { (name, $0) } } + more.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    var query: [(String, String)] {
        parameters + [("priority", priority), ("sig", sig)].compactMap { name, value in value.map { (name, $0) } }
    }
}
