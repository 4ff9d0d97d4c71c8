import BlobStore
import Foundation
import Support
import Synchronization
import Upstream

/// Previews (`"preview": true`): a blurred tile, sent once, in its own event before `done` or inside it;
/// `end` waits for the previews announced.
extension Batch {
    /// The item's preview, in an event of its own: sent once, before `done` when the tile is
    /// still being made (or after it, when the image came from the cache without one); not
    /// for an item that failed or was cancelled.
    func preview(_ index: Int, _ uri: String) {
        let woken = state.withLock { state -> [EventSubscriber] in appendPreview(index, uri, &state) }
        wake(woken)
    }

    func appendPreview(_ index: Int, _ uri: String, _ state: inout State) -> [EventSubscriber] {
        let item = state.items[index]
        guard state.finishedAt == nil, !item.previewSent, item.state != .failed, item.state != .cancelled else { return [] }
        state.items[index].previewSent = true
        return log.append("preview", """
            {"index":\(index),"id":\(Self.json(item.clientID)),"preview":\(JSONText.quote(uri))}
            """)
    }

    /// A preview will be made for an item that is (about to be) done: `end` waits for it.
    func expectPreview() {
        state.withLock { state in if state.finishedAt == nil { state.pendingPreviews += 1 } }
    }

    /// Whether previews announced by `expectPreview` are still awaited (not after a cancel).
    var awaitsPreviews: Bool { state.withLock { $0.finishedAt == nil && $0.pendingPreviews > 0 } }

    /// The preview `expectPreview` announced is made (`uri`) or will not be (nil).
    func previewFinished(_ index: Int, _ uri: String?) {
        let woken = state.withLock { state -> [EventSubscriber] in
            guard state.finishedAt == nil, state.pendingPreviews > 0 else { return [] }
            state.pendingPreviews -= 1
            let woken = uri.map { appendPreview(index, $0, &state) } ?? []
            return endIfComplete(&state) ?? woken
        }
        wake(woken)
    }

    func previewSent(_ index: Int) -> Bool { state.withLock { $0.items[index].previewSent } }
}
