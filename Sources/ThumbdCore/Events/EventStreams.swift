import Synchronization

/// Every open event stream of a daemon, counted by the log it reads, and what they all share:
/// the `retry:` line they start with. Each stream holds one
/// reference to this instead of a copy of each (10,000 streams are open at a time).
///
/// The streams themselves are their logs' subscribers; here each log has a count, so 10,000
/// streams on 100 batches are 100 entries. A log stays while streams read it, whether or not
/// its batch is still kept: keepalives reach a stream whose batch was dropped (retention, or
/// the kept-memory budget) until it ends.
final class EventStreams: Sendable {
    /// The bytes every stream starts with: how long EventSource waits before it reconnects.
    let preamble: [UInt8]
    private let logs = Mutex<[ObjectIdentifier: (log: EventLog, count: Int)]>([:])

    init(retryMilliseconds: Int) {
        preamble = Array("retry: \(retryMilliseconds)\n\n".utf8)  // well under 64 KB: counted in a UInt16
    }

    /// A new stream reading `log` from the event after `lastEventID`.
    func subscribe(_ log: EventLog, lastEventID: Int?) -> EventSubscriber {
        logs.withLock { $0[ObjectIdentifier(log), default: (log, 0)].count += 1 }
        return EventSubscriber(log: log, lastEventID: lastEventID, streams: self)
    }

    /// A stream of `log` has ended (`EventSubscriber.detach`).
    func ended(on log: EventLog) {
        logs.withLock { logs in
            let key = ObjectIdentifier(log)
            guard let entry = logs[key] else { return }
            if entry.count > 1 { logs[key]?.count -= 1 } else { logs.removeValue(forKey: key) }
        }
    }

    /// Open streams (for tests, metrics and shutdown).
    var count: Int { logs.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    /// Every stream reading one of the logs (those not yet attached to their connection are
    /// not among them: they start with what there is).
    var subscribers: [EventSubscriber] {
        logs.withLock { $0.values.map(\.log) }.flatMap(\.subscriberList)
    }
}
