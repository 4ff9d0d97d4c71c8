import Synchronization

/// Every event of one batch, in order, each already rendered as SSE text. Subscribers read
/// from it at their own position (a cursor), so a slow reader costs nothing but its cursor:
/// there is no queue per subscriber to grow. A late subscriber starts from the beginning,
/// or after its `Last-Event-ID`. Ids are 1, 2, 3… within the log.
public final class EventLog: Sendable {
    struct Event {
        let id: Int
        let text: [UInt8]
    }

    private struct State {
        var events: [Event] = []
        var finished = false
        var subscribers: [ObjectIdentifier: EventSubscriber] = [:]
    }

    private let state = Mutex(State())

    public init() {}

    /// Appends an event and returns the subscribers to wake (wake them after releasing any
    /// lock of your own).
    @discardableResult
    func append(_ name: String, _ json: String) -> [EventSubscriber] {
        state.withLock { state in
            precondition(!state.finished, "event \(name) after the end of the log")
            let id = state.events.count + 1
            var text = "id: \(id)\nevent: \(name)\n"
            for line in json.split(separator: "\n", omittingEmptySubsequences: false) {
                text += "data: \(line)\n"
            }
            text += "\n"
            state.events.append(Event(id: id, text: Array(text.utf8)))
            return Array(state.subscribers.values)
        }
    }

    /// No event follows; subscribers end their streams once they have read everything.
    func finish() -> [EventSubscriber] {
        state.withLock { state in
            state.finished = true
            return Array(state.subscribers.values)
        }
    }

    var count: Int { state.withLock { $0.events.count } }
    var isFinished: Bool { state.withLock { $0.finished } }
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// The index of the first event after `lastEventID` (0 for everything).
    func index(after lastEventID: Int?) -> Int {
        guard let lastEventID else { return 0 }
        return state.withLock { max(0, min(lastEventID, $0.events.count)) }  // ids are index + 1
    }

    /// Events from `index` on (at most `limit`), and whether the log is finished.
    func events(from index: Int, limit: Int = 64) -> (events: ArraySlice<Event>, finished: Bool) {
        state.withLock { state in
            let end = min(state.events.count, index + limit)
            let slice = index < end ? state.events[index..<end] : []
            return (slice, state.finished)
        }
    }

    func subscribe(_ subscriber: EventSubscriber) {
        state.withLock { $0.subscribers[ObjectIdentifier(subscriber)] = subscriber }
    }

    func unsubscribe(_ subscriber: EventSubscriber) {
        state.withLock { $0.subscribers[ObjectIdentifier(subscriber)] = nil }
    }

    func allSubscribers() -> [EventSubscriber] {
        state.withLock { Array($0.subscribers.values) }
    }
}
