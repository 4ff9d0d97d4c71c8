import BlobStore
import Foundation
import Support
import Synchronization

/// `POST /batches/<id>/items`: more items for a running batch, asked as its own were.
extension BatchRegistry {
    /// What a running batch's items ask for: its request (its items, each one's parameters
    /// and `sig`, added items after the first), and what every item shares. The deferred
    /// start and the added items read it, so an index is never looked up in an older copy.
    final class Plan: Sendable {
        let base: Item
        let accept: String?
        let requestID: String?
        let request: Mutex<BatchRequest>

        init(_ request: BatchRequest, base: Item, accept: String?, requestID: String?) {
            self.request = Mutex(request)
            self.base = base
            self.accept = accept
            self.requestID = requestID
        }
    }

    /// Adds the items of `body` (`BatchRequest.added`) to `batch` and starts them, those it
    /// names on screen first (joining the batch's screen). Returns the 200's body: the new
    /// items, as `POST /batches` lists its own.
    func add(_ body: Bytes, to batch: Batch, requestID: String?) throws(ThumbdError) -> String {
        let added = try BatchRequest.added(body: body, maxItems: configuration.maxItems, presets: variants.presets)
        guard let plan = plans.withLock({ $0[batch.id] }) else {
            throw ThumbdError(.batchEnded, "batch \(batch.id) has ended; items go into a new batch")
        }
        let range = try batch.add(added.items, maxItems: configuration.maxItems,
                                  body: String(decoding: body.array, as: UTF8.self)) {
            plan.request.withLock { $0.append(added) }
        }
        let focused = added.focus.map { range.lowerBound + $0 }
        if !focused.isEmpty { focus(batch, on: Array(batch.focusedIndices.union(focused)).sorted()) }
        let request = plan.request.withLock { $0 }
        let rest = range.filter { !Set(focused).contains($0) }
        start(batch, request, base: plan.base, indices: focused + rest, accept: plan.accept, requestID: requestID ?? plan.requestID)
        return batch.created(range)
    }

    /// A restored batch's request with the items added to it before the restart (its
    /// journal's `items` rows, in order); nil if one of them no longer parses (a preset
    /// since removed), since every later index would be wrong.
    func withAdded(_ request: BatchRequest, _ entries: [Journal.Entry]) -> BatchRequest? {
        var request = request
        for entry in entries where entry.kind == "items" {
            guard let fields = try? JSONSerialization.jsonObject(with: Data(entry.data.array)) as? [String: Any],
                  let body = fields["body"] as? String,
                  let added = try? BatchRequest.added(body: Bytes(Array(body.utf8)), maxItems: configuration.maxItems,
                                                      presets: variants.presets)
            else { return nil }
            request.append(added)
        }
        return request
    }
}
