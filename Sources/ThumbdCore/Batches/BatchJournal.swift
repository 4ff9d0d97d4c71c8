import BlobStore
import Dispatch
import Foundation
import Support
import Synchronization

/// A batch's record in the store, so that it survives a restart of the daemon (an upgrade, a
/// crash): its definition (the POST's body and `Accept`) when it is created, then every
/// event but `progress` with its id, as it is appended to the log. On start-up the registry
/// rebuilds each kept batch from its journal: its log (same ids, so `Last-Event-ID` resumes
/// as before), its items' states, and it starts again what had not finished.
///
/// Progress events are not recorded (a few per second per item), but their ids are
/// reserved: the journal keeps `reserved`, above every id used, a block ahead of the log,
/// and the restored log goes on from there, so an id a client saw is never given again.
final class BatchJournal: Sendable {
    /// Ids reserved at a time; the next block is asked for when half of this one is used.
    static let block = 1024

    let id: String
    private let store: CacheStore
    private let reservation: Mutex<(asked: Int, committed: Int)>
    /// Shutdown: what happens from here on (transfers aborted, resizes stopped) is not the
    /// batch's outcome, so it is not recorded; after the restart those items start again.
    private let closed = Atomic<Bool>(false)

    /// Stops recording, and writes what was recorded so far.
    func close() {
        closed.store(true, ordering: .relaxed)
        flush()
        committed(below: .max)  // nothing more is recorded: nothing waits for a reservation
    }

    var isClosed: Bool { closed.load(ordering: .relaxed) }

    /// A restored batch's journal, whose ids so far are all below `reserved`.
    init(id: String, store: CacheStore, reserved: Int) {
        self.id = id
        self.store = store
        reservation = Mutex((reserved, reserved))
    }

    /// What `POST /batches` was given: enough to build the batch again.
    struct Definition: Codable {
        var body: String
        var accept: String?
        /// Posted by thumbd's own page: its items are signed by the daemon (absent: false).
        var fromOwnPage: Bool?
    }

    /// Records a new batch (the write is queued; the caller does not wait). Ids start at 1,
    /// below the first block; the journal's reserved id is recorded with it, so even a crash
    /// before the first reservation commits cannot reuse one.
    static func new(id: String, store: CacheStore) -> BatchJournal {
        BatchJournal(id: id, store: store, reserved: block)
    }

    /// Writes the definition (before the batch's first event).
    func begin(_ definition: Definition, createdAt: Int64) {
        let data = (try? JSONEncoder().encode(definition)).map { Bytes(Array($0)) } ?? .empty
        store.openJournal(id: id, definition: data, createdAt: createdAt, reserved: Self.block)
    }

    static func definition(of journal: Journal) -> Definition? {
        try? JSONDecoder().decode(Definition.self, from: Data(journal.definition.array))
    }

    /// Events waiting to be written: a grid's burst of `done` events is one transaction, not
    /// one each, and none is written while the events are being delivered.
    private let pending = Mutex<(entries: [Journal.Entry], finished: Bool, scheduled: Bool)>(([], false, false))
    /// How long an event waits for the ones after it (a crash in between loses only this
    /// much: those items are made again after the restart).
    static let flushDelay: DispatchTimeInterval = .milliseconds(50)
    private static let flushes = DispatchQueue(label: "thumbd.batches.journal")

    /// The log appended event `eventID` (under its lock, so in order).
    func record(_ eventID: Int, _ name: String, _ json: String) {
        guard !closed.load(ordering: .relaxed) else { return }
        if name != "progress" {
            let entry = Journal.Entry(sequence: eventID, kind: name, data: Bytes(Array(json.utf8)))
            let schedule = pending.withLock { pending -> Bool in
                pending.entries.append(entry)
                if name == "end" { pending.finished = true }
                defer { pending.scheduled = true }
                return !pending.scheduled
            }
            if schedule { Self.flushes.asyncAfter(deadline: .now() + Self.flushDelay) { [self] in flush() } }
        }
        reserve(beyond: eventID)
    }

    /// Writes what waits (also at shutdown, before the store closes).
    func flush() {
        let (entries, finished) = pending.withLock { pending -> ([Journal.Entry], Bool) in
            defer { pending = ([], false, false) }
            return (pending.entries, pending.finished)
        }
        guard !entries.isEmpty else { return }
        store.appendJournal(id: id, entries, finishedAt: finished ? ObjectSource.now() : nil)
    }

    /// Told the first id not yet reserved each time a reservation commits: the batch's log
    /// lets its readers see the events below it (`EventLog.release(below:)`).
    private let committedHandler = Slot<@Sendable (Int) -> Void>()

    /// The first id a reservation has not committed yet: the log's readers see the events below it.
    var committedBelow: Int { reservation.withLock { $0.committed } }

    func onCommit(_ handler: @escaping @Sendable (Int) -> Void) {
        committedHandler.set(handler)
    }

    /// Keeps the committed reservation ahead of `eventID`: the next block is asked for when
    /// half of this one is used. Nothing waits here (this runs under the log's lock and the
    /// batch's): an event past the committed reservation waits in the log until the commit
    /// comes (`onCommit`). A reservation that fails (the store cannot write, `/healthz` says
    /// so) lets the events through all the same: a batch must not stop because its record does.
    private func reserve(beyond eventID: Int) {
        let ask = reservation.withLock { reservation -> Int? in
            guard eventID + Self.block / 2 >= reservation.asked else { return nil }
            reservation.asked += Self.block
            return reservation.asked
        }
        guard let ask else { return }
        store.reserveJournal(id: id, upTo: ask) { [self] _ in
            reservation.withLock { $0.committed = max($0.committed, ask) }
            committed(below: ask)
        }
    }

    private func committed(below id: Int) {
        committedHandler.value?(id)
    }
}
