import AsyncHTTPClient
import EventStream
import Foundation
import NIOCore

/// One item of a batch: a URL, a tag of yours, thumbnail parameters of its own (they win
/// over the batch's) and its signature, made by your server.
public struct BatchItem: Sendable, Hashable, ExpressibleByStringLiteral {
    public var url: String
    public var id: String?
    public var options: ThumbnailOptions

    public init(url: String, id: String? = nil, options: ThumbnailOptions = ThumbnailOptions()) {
        self.url = url
        self.id = id
        self.options = options
    }

    public init(stringLiteral url: String) { self.init(url: url) }
}

/// What applies to every item of a batch.
public struct BatchOptions: Sendable {
    public var thumbnail: ThumbnailOptions
    public var priority: String?
    /// A tiny blurred preview per item (`preview` events, or inside `done`).
    public var preview: Bool
    /// The items on screen now: fetched and made first.
    public var focus: [Int]
    /// Items that left the screen long ago are cancelled (and asked again when they return).
    public var cancelOffscreen: Bool
    /// How long a dropped stream is retried (a daemon restart) before the batch throws.
    public var reconnectFor: Duration

    public init(thumbnail: ThumbnailOptions = ThumbnailOptions(), priority: String? = nil, preview: Bool = false,
                focus: [Int] = [], cancelOffscreen: Bool = false, reconnectFor: Duration = .seconds(60)) {
        self.thumbnail = thumbnail
        self.priority = priority
        self.preview = preview
        self.focus = focus
        self.cancelOffscreen = cancelOffscreen
        self.reconnectFor = reconnectFor
    }

    func body(_ items: [BatchItem]) throws -> Data {
        var object: [String: Any] = [
            "items": items.map { item -> [String: Any] in
                var entry: [String: Any] = ["url": item.url]
                if let id = item.id { entry["id"] = id }
                if let sig = item.options.sig { entry["sig"] = sig }
                for (name, value) in item.options.parameters { entry[name] = value }
                return entry
            },
        ]
        for (name, value) in thumbnail.parameters { object[name] = value }
        if let priority { object["priority"] = priority }
        if preview { object["preview"] = true }
        if !focus.isEmpty { object["focus"] = focus }
        if cancelOffscreen { object["cancelOffscreen"] = true }
        return try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    }
}

/// A batch's events, typed. `opened` comes first (the batch's id, for `focus` and `cancel`),
/// `end` last.
public enum BatchEvent: Sendable, Equatable {
    case opened(id: String, items: [Item])
    /// Items added to the batch (by another client, with `POST /batches/<id>/items`).
    case added(from: Int, items: [Item])
    case progress(index: Int, received: Int, total: Int?)
    case preview(index: Int, dataURI: String)
    case done(Done)
    case failed(Failure)
    case cancelled(index: Int)
    case end(End)
    /// The daemon is stopping; the stream resumes by itself once it is back.
    case restarting

    public struct Item: Sendable, Equatable, Decodable {
        public let index: Int
        public let id: String?
        public let url: String
        /// The `/thumb` path of its image (answered from the cache once `done`).
        public let src: String?
    }

    public struct Done: Sendable, Equatable, Decodable {
        public let index: Int
        public let id: String?
        public let url: String
        public let src: String
        public let status: Int
        public let bytes: Int
        public let contentType: String
        public let cache: String
        public let ms: Int
    }

    public struct Failure: Sendable, Equatable, Decodable {
        public let index: Int
        public let id: String?
        public let url: String
        public let status: Int
        public let error: String
        public let message: String
    }

    public struct End: Sendable, Equatable, Decodable {
        public let total: Int
        public let done: Int
        public let failed: Int
        public let cancelled: Int
        public let ms: Int
    }

    /// The event of a stream's `event:` and `data:` (nil: a kind this client does not know).
    init?(type: String, data: String) throws {
        let json = Data(data.utf8)
        let decoder = JSONDecoder()
        switch type {
        case "progress":
            struct Progress: Decodable { var index: Int; var received: Int; var total: Int? }
            let progress = try decoder.decode(Progress.self, from: json)
            self = .progress(index: progress.index, received: progress.received, total: progress.total)
        case "preview":
            struct Preview: Decodable { var index: Int; var preview: String }
            let preview = try decoder.decode(Preview.self, from: json)
            self = .preview(index: preview.index, dataURI: preview.preview)
        case "items":
            struct Added: Decodable { var from: Int; var items: [Item] }
            let added = try decoder.decode(Added.self, from: json)
            self = .added(from: added.from, items: added.items)
        case "done": self = .done(try decoder.decode(Done.self, from: json))
        case "failed": self = .failed(try decoder.decode(Failure.self, from: json))
        case "cancelled":
            struct Cancelled: Decodable { var index: Int }
            self = .cancelled(index: try decoder.decode(Cancelled.self, from: json).index)
        case "end": self = .end(try decoder.decode(End.self, from: json))
        case "shutdown": self = .restarting
        default: return nil
        }
    }
}

/// `DaemonClient.batch`: the batch is posted when iteration starts.
public struct BatchEvents: AsyncSequence, Sendable {
    public typealias Element = BatchEvent
    let client: DaemonClient
    let items: [BatchItem]
    let options: BatchOptions

    public func makeAsyncIterator() -> AsyncThrowingStream<BatchEvent, any Error>.Iterator {
        let (stream, continuation) = AsyncThrowingStream<BatchEvent, any Error>.makeStream()
        // The one task that posts and follows the batch; the consumer leaving (its task
        // cancelled, or the loop left before `end`) cancels it, and it cancels the batch.
        let task = Task { [client, items, options] in
            do {
                try await Self.run(client: client, items: items, options: options, continuation: continuation)
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream.makeAsyncIterator()
    }

    /// Posts the batch, then follows its stream to `end`, reconnecting with the last id.
    /// The batch is cancelled on the daemon when this task is cancelled before `end`.
    static func run(client: DaemonClient, items: [BatchItem], options: BatchOptions,
                    continuation: AsyncThrowingStream<BatchEvent, any Error>.Continuation) async throws {
        let body = try await client.expect(201, "POST", "/batches", json: try options.body(items))
        let created = try JSONDecoder().decode(Created.self, from: Data(body))
        continuation.yield(.opened(id: created.id, items: created.items))
        // The events already there come with the answer (a batch of cached items: every one,
        // `end` included); the stream is read after the last of them, or not at all.
        for event in try Created.log(of: Data(body)) {
            guard let typed = try BatchEvent(type: event.type, data: event.data) else { continue }
            continuation.yield(typed)
            if case .end = typed { return }
        }
        do {
            try await follow(client: client, created: created, options: options, continuation: continuation)
        } catch {
            if Task.isCancelled {
                // Its DELETE runs as a task of its own: a request this cancelled task made
                // would be cancelled with it. It ends with that request (bounded by the
                // client's timeout).
                Task { try? await client.cancel(batch: created.id) }
            }
            throw error
        }
    }

    struct Created: Decodable, Sendable {
        var id: String
        var events: String
        var items: [BatchEvent.Item]
        /// The id of the last event of the answer's `log` (absent from a daemon before it).
        var lastEventId: Int?

        /// The answer's `log`: each event's name and JSON, as the stream gives them.
        static func log(of body: Data) throws -> [(type: String, data: String)] {
            let answer = try JSONSerialization.jsonObject(with: body) as? [String: Any]
            return try (answer?["log"] as? [[String: Any]] ?? []).compactMap { entry in
                guard let type = entry["event"] as? String, let data = entry["data"] else { return nil }
                return (type, String(decoding: try JSONSerialization.data(withJSONObject: data), as: UTF8.self))
            }
        }
    }

    /// Follows the stream of `created` to `end`, reconnecting with the last id.
    static func follow(client: DaemonClient, created: Created, options: BatchOptions,
                       continuation: AsyncThrowingStream<BatchEvent, any Error>.Continuation) async throws {
        var lastEventID = created.lastEventId.flatMap { $0 > 0 ? String($0) : nil }
        var retry = Duration.seconds(1)
        var lastHeard = ContinuousClock.now
        while true {
            try Task.checkCancellation()
            do {
                var headers = [("Accept", "text/event-stream")]
                if let lastEventID { headers.append(("Last-Event-ID", lastEventID)) }
                let response = try await client.send("GET", created.events, headers: headers, timeout: .hours(24))
                guard response.status == .ok else {
                    let body = try await response.body.collect(upTo: 1 << 16)
                    throw DaemonError(status: Int(response.status.code), body: body)
                }
                var parser = EventStreamParser()
                for try await buffer in response.body {
                    lastHeard = .now
                    parser.feed(buffer.readableBytesView)
                    if let milliseconds = parser.retry { retry = .milliseconds(milliseconds) }
                    for event in parser.takeEvents() {
                        if !event.lastEventID.isEmpty { lastEventID = event.lastEventID }
                        guard let typed = try BatchEvent(type: event.type, data: event.data) else { continue }
                        continuation.yield(typed)
                        if case .end = typed { return }
                    }
                }
            } catch let error as DaemonError where error.status != 0 {
                throw error  // the daemon refused the stream (the batch is gone): not a drop
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                // A drop (a restart, the network): retried below.
            }
            guard ContinuousClock.now - lastHeard < options.reconnectFor else {
                throw DaemonError(status: 0, error: "unreachable",
                                  message: "the event stream of batch \(created.id) dropped and did not come back")
            }
            try await Task.sleep(for: retry)
        }
    }
}

extension BatchEvent.Item: Encodable {}
extension BatchEvent.Done: Encodable {}
extension BatchEvent.Failure: Encodable {}
extension BatchEvent.End: Encodable {}

extension BatchEvent {
    /// `{"data":{…},"event":"done"}`, the daemon's fields by their names: what `thumbd warm
    /// --json` prints, one line per event.
    public var jsonLine: String? {
        switch self {
        case .opened(let id, let items): return Self.line("opened", Opened(id: id, items: items))
        case .added(let from, let items): return Self.line("items", Added(from: from, items: items))
        case .progress(let index, let received, let total): return Self.line("progress", Progress(index: index, received: received, total: total))
        case .preview(let index, let dataURI): return Self.line("preview", Preview(index: index, preview: dataURI))
        case .done(let done): return Self.line("done", done)
        case .failed(let failure): return Self.line("failed", failure)
        case .cancelled(let index): return Self.line("cancelled", Cancelled(index: index))
        case .end(let end): return Self.line("end", end)
        case .restarting: return Self.line("shutdown", Cancelled?.none)
        }
    }

    private struct Opened: Encodable { var id: String; var items: [Item] }
    private struct Added: Encodable { var from: Int; var items: [Item] }
    private struct Progress: Encodable { var index: Int; var received: Int; var total: Int? }
    private struct Preview: Encodable { var index: Int; var preview: String }
    private struct Cancelled: Encodable { var index: Int }

    private static func line(_ event: String, _ data: some Encodable) -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(JSONLine(event: event, data: data))).map { String(decoding: $0, as: UTF8.self) }
    }
}

private struct JSONLine<Data: Encodable>: Encodable {
    var event: String
    var data: Data
}
