import BlobStore
import Foundation
import Support
import Synchronization
import Upstream

/// What a batch says of itself: the snapshot `GET /batches/<id>` answers, and the 201 of its creation.
extension Batch {
    // MARK: Views

    /// `GET /batches/<id>`: each item's state and the counts.
    func snapshot() -> String {
        state.withLock { state in
            let items = state.items.map { item in
                """
                {"index":\(item.index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url)),\
                "src":\(Self.json(item.src)),"state":"\(item.state.rawValue)",\
                "focused":\(item.focused)}
                """
            }
            let queued = state.items.filter { $0.state == .queued }.count
            let fetching = state.items.filter { $0.state == .fetching }.count
            return """
                {"id":"\(id)","state":"\(state.finishedAt == nil ? "running" : "finished")",\
                "counts":{"total":\(state.items.count),"queued":\(queued),"fetching":\(fetching),\
                "done":\(state.done),"failed":\(state.failed),"cancelled":\(state.cancelled)},\
                "events":"/batches/\(id)/events","items":[\(items.joined(separator: ","))]}\n
                """
        }
    }

    /// The 201 answer to `POST /batches` (every item), and the 200 of `POST …/items` (those
    /// added). With `log` (the 201): the events already in the log, each as the stream gives
    /// it, and the last one's id (`lastEventId`, 0 for none): a warm batch is all there,
    /// `end` included, and a client resumes the stream after it.
    func created(_ range: Range<Int>? = nil, log withLog: Bool = false) -> String {
        let items = state.withLock { state in
            state.items[range ?? state.items.indices].map { item in
                """
                {"index":\(item.index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url)),"src":\(Self.json(item.src))}
                """
            }
        }
        var logged = ""
        if withLog {
            let events = log.readable(upTo: Self.answerLogBytes)
            let rendered = events.map { #"{"id":\#($0.id),"event":"\#($0.name)","data":\#($0.json)}"# }
            logged = #","log":[\#(rendered.joined(separator: ","))],"lastEventId":\#(events.last?.id ?? 0)"#
        }
        return """
            {"id":"\(id)","events":"/batches/\(id)/events","items":[\(items.joined(separator: ","))]\(logged)}\n
            """
    }

    /// The most event text a 201 carries: a warm grid of 120 inline tiles is about 0.4 MB; a
    /// batch of 1000 items of 16 KB tiles would be 22 MB, copied for the answer while the
    /// stream sends the same from the log. Past it, the client reads the rest from the stream.
    static let answerLogBytes = 4 << 20

    static func json(_ text: String?) -> String { text.map(JSONText.quote) ?? "null" }
}
