import Foundation
import Support

/// A batch on a running thumbd, for a Swift tool or app on the machine: open it, then follow
/// its events until `end`, reconnecting with `Last-Event-ID` as a browser's EventSource does
/// (across a restart of the daemon too).
///
/// ```swift
/// let batch = try BatchSession.open(server: "http://127.0.0.1:8080",
///                                   items: [.init(url: "https://example.org/a.jpg")],
///                                   parameters: ["w": "256", "h": "256", "format": "webp"])
/// try batch.follow { event in
///     if event.type == "done" { print(event.data) }   // {"index":0,"src":"/thumb?url=…",…}
///     return true                                     // false: stop following
/// }
/// ```
public struct BatchSession: Sendable {
    public struct Item: Sendable, Encodable {
        public var url: String
        /// Your own id for it, echoed in its events.
        public var id: String?
        /// Its `sig`, when the daemon has `signing.keys`.
        public var sig: String?

        public init(url: String, id: String? = nil, sig: String? = nil) {
            self.url = url
            self.id = id
            self.sig = sig
        }
    }

    public typealias Event = EventStreamParser.Event

    /// `http://HOST:PORT` of the daemon.
    public let server: String
    /// The batch's id, and the path of its event stream.
    public let id: String
    public let events: String

    /// Opens a batch: `POST /batches` with the items, the thumbnail parameters for all of them
    /// (as the query names them: `w`, `h`, `fit`, `format`, `preset`…; none: the originals),
    /// and its `priority` (`high`, `normal`, `low`). Throws the daemon's refusal, with its message.
    public static func open(server: String, items: [Item], parameters: [String: String] = [:],
                            priority: String? = nil) throws -> BatchSession {
        let body = try JSONEncoder().encode(Body(items: items, priority: priority, parameters: parameters))
        let post = try DaemonConnection(base: server)
        let head = try post.send("POST", "/batches", headers: ["Content-Type": "application/json"], body: Array(body))
        let answer = try? JSONDecoder().decode(Answer.self, from: Data(try post.body()))
        guard head.status == 201, let id = answer?.id, let events = answer?.events else {
            throw DaemonClientError("thumbd refused the batch (\(head.status)): \(answer?.message ?? "no message")")
        }
        return BatchSession(server: server, id: id, events: events)
    }

    public init(server: String, id: String, events: String) {
        self.server = server
        self.id = id
        self.events = events
    }

    /// Calls `handle` with each event, in order, until `end` (returns true) or until `handle`
    /// returns false (returns false). A stream that drops is opened again with the last
    /// event's id, up to `attempts` times, waiting a little longer each time.
    @discardableResult
    public func follow(attempts: Int = 5, _ handle: (Event) throws -> Bool) throws -> Bool {
        var lastEventID: String?
        for attempt in 0..<attempts {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.5 * Double(attempt)) }
            let stream: DaemonConnection
            do {
                stream = try DaemonConnection(base: server, timeoutSeconds: 120)
                var headers = ["Accept": "text/event-stream"]
                if let lastEventID { headers["Last-Event-ID"] = lastEventID }
                let head = try stream.send("GET", events, headers: headers)
                guard head.status == 200 else { throw DaemonClientError("the event stream answered \(head.status)") }
            } catch {
                continue
            }
            var parser = EventStreamParser()
            while let chunk = try? stream.nextChunk() {
                parser.feed(chunk)
                for event in parser.takeEvents() {
                    if !event.lastEventID.isEmpty { lastEventID = event.lastEventID }
                    guard try handle(event) else { return false }
                    if event.type == "end" { return true }
                }
            }
        }
        throw DaemonClientError("the event stream ended before the batch did")
    }

    /// `POST /batches/<id>/focus`: these items are on screen now; they go first.
    public func focus(_ indices: [Int]) throws {
        let body = try JSONEncoder().encode(["items": indices])
        let connection = try DaemonConnection(base: server)
        let head = try connection.send("POST", "/batches/\(id)/focus", headers: ["Content-Type": "application/json"],
                                       body: Array(body))
        _ = try connection.body()
        guard head.status == 204 else { throw DaemonClientError("focus answered \(head.status)") }
    }

    /// `DELETE /batches/<id>`: what is still queued or in flight is cancelled.
    public func cancel() throws {
        let connection = try DaemonConnection(base: server)
        let head = try connection.send("DELETE", "/batches/\(id)")
        _ = try connection.body()
        guard head.status == 200 else { throw DaemonClientError("cancel answered \(head.status)") }
    }

    /// `{"items": [...], "priority": …}` and each thumbnail parameter as a string (the
    /// daemon reads `"w": "64"` as `"w": 64`).
    private struct Body: Encodable {
        var items: [Item]
        var priority: String?
        var parameters: [String: String]

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(items, forKey: Key(stringValue: "items"))
            try container.encodeIfPresent(priority, forKey: Key(stringValue: "priority"))
            for (name, value) in parameters.sorted(by: { $0.key < $1.key }) {
                try container.encode(value, forKey: Key(stringValue: name))
            }
        }
    }

    /// The 201 (`id`, `events`) or an error (`message`).
    private struct Answer: Decodable {
        var id: String?
        var events: String?
        var message: String?
    }
}
