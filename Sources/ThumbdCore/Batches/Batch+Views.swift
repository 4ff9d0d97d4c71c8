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

    /// The 201 answer to `POST /batches` (every item), and the 200 of `POST …/items` (those added).
    func created(_ range: Range<Int>? = nil) -> String {
        state.withLock { state in
            let items = state.items[range ?? state.items.indices].map { item in
                """
                {"index":\(item.index),"id":\(Self.json(item.clientID)),"url":\(JSONText.quote(item.url)),"src":\(Self.json(item.src))}
                """
            }
            return """
                {"id":"\(id)","events":"/batches/\(id)/events","items":[\(items.joined(separator: ","))]}\n
                """
        }
    }

    static func json(_ text: String?) -> String { text.map(JSONText.quote) ?? "null" }
}
