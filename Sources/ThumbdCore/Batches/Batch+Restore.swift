import BlobStore
import Foundation
import Support
import Synchronization
import Upstream

/// A batch rebuilt from its journal after a restart.
extension Batch {
    // MARK: Restoring

    /// Puts back what the journal recorded before a restart: each event into the log, with
    /// its id, and each item's state from it. `finishedAgo`: when the batch had ended.
    func restore(_ entries: [Journal.Entry], finishedAgo: Duration?) {
        state.withLock { state in
            for entry in entries {
                let json = String(decoding: entry.data.array, as: UTF8.self)
                log.restore(id: entry.sequence, entry.kind, json)
                let fields = (try? JSONSerialization.jsonObject(with: Data(entry.data.array))) as? [String: Any] ?? [:]
                guard let index = fields["index"] as? Int, state.items.indices.contains(index) else { continue }
                var item = state.items[index]
                let was = item.state
                switch entry.kind {
                case "done", "failed", "cancelled":
                    let now = ItemState(rawValue: entry.kind) ?? .failed
                    if was == .cancelled { state.cancelled -= 1 }  // cancelled off screen, then made after all
                    if was == .done { state.done -= 1 }
                    if was == .failed { state.failed -= 1 }
                    item.state = now
                    switch now {
                    case .done: state.done += 1
                    case .failed: state.failed += 1
                    default: state.cancelled += 1
                    }
                    if fields["preview"] != nil { item.previewSent = true }
                case "preview":
                    item.previewSent = true
                default:
                    break
                }
                state.items[index] = item
            }
            if let finishedAgo {
                state.finishedAt = ContinuousClock.now - finishedAgo
                _ = log.finish()
            }
        }
    }

    /// Appends `end` if every item has finished (a restored batch whose end was not recorded).
    func endIfDone() {
        let woken = state.withLock { endIfComplete(&$0) ?? [] }
        wake(woken)
    }

    /// The items still to make (after a restore).
    var unfinished: [Int] { state.withLock { $0.items.filter { !$0.isTerminal }.map(\.index) } }
}
