import Support
import Synchronization

/// Items added to a running batch (`POST /batches/<id>/items`): a page whose elements come
/// and go (a framework's re-render, a virtual list) keeps one batch and one event stream.
extension Batch {
    /// `added` join the batch after its items, queued, their indices following on; `merged`
    /// runs under the batch's lock once the indices are taken (the registry's record of
    /// what each item asks, so that two additions at once keep one order). An `items` event
    /// names them; its journal row also keeps `body`, the request that added them, so that a
    /// restart rebuilds them. Refused once the batch has ended (a new batch is the answer), or
    /// past `maxItems` in all.
    func add(_ added: [(clientID: String?, url: String)], maxItems: Int, body: String,
             merged: () -> Void) throws(ThumbdError) -> Range<Int> {
        let outcome = state.withLock { state -> Result<(Range<Int>, [EventSubscriber]), ThumbdError> in
            guard state.finishedAt == nil else {
                return .failure(ThumbdError(.batchEnded, "batch \(id) has ended; items go into a new batch"))
            }
            guard state.items.count + added.count <= maxItems else {
                return .failure(ThumbdError(.tooManyItems,
                                            "a batch holds at most \(maxItems) items; this one has \(state.items.count)"))
            }
            let from = state.items.count
            state.items += added.enumerated().map { Item(index: from + $0.offset, clientID: $0.element.clientID, url: $0.element.url) }
            merged()
            let listed = added.enumerated().map {
                "{\"index\":\(from + $0.offset),\"id\":\(Self.json($0.element.clientID)),\"url\":\(JSONText.quote($0.element.url))}"
            }.joined(separator: ",")
            let woken = log.append("items", "{\"from\":\(from),\"items\":[\(listed)]}",
                                   recorded: "{\"from\":\(from),\"items\":[\(listed)],\"body\":\(JSONText.quote(body))}")
            return .success((from..<state.items.count, woken))
        }
        let (range, woken) = try outcome.get()
        wake(woken)
        return range
    }

    /// The items the page last said were on screen.
    var focusedIndices: Set<Int> { state.withLock { Set($0.items.filter(\.focused).map(\.index)) } }
}
