import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// How long batches are kept: in memory (`batches.retentionSeconds`, `maxKept`, `maxKeptBytes`) and, as
/// journals, across a restart.
extension BatchRegistry {
    /// At start-up: the batches recorded in the store's journals come back as they were, with
    /// their logs (same ids) and their items' states; what had not finished starts again.
    /// Returns how many came back.
    @discardableResult
    func restore(_ journals: [Journal], logger: Logger) -> Int {
        let now = ObjectSource.now()
        var restored = 0
        var previous: ContinuousClock.Instant?
        for journal in journals {  // in the order they were created
            if let finished = journal.finishedAt, now - finished >= Int64(configuration.retentionSeconds) { continue }
            guard let definition = BatchJournal.definition(of: journal),
                  let posted = try? BatchRequest(body: Bytes(Array(definition.body.utf8)), maxItems: configuration.maxItems,
                                                 presets: variants.presets),
                  var request = withAdded(posted, journal.entries),
                  let base = try? baseItem(of: request, accept: definition.accept)
            else {
                logger.warning("batch.restore.skipped", metadata: ["batch.id": "\(journal.id)"])
                continue
            }
            request.fromOwnPage = definition.fromOwnPage ?? false
            // Journals keep whole seconds: batches started in the same one keep their order.
            var started = ContinuousClock.now - .seconds(max(0, now - journal.createdAt))
            if let previous, started <= previous { started = previous + .nanoseconds(1) }
            previous = started
            let batch = Batch(id: journal.id, items: request.items,
                              progressInterval: .milliseconds(configuration.progressIntervalMilliseconds),
                              cancelOffscreen: request.cancelOffscreen,
                              yieldsOffscreen: yieldsOffscreen(request),
                              journal: BatchJournal(id: journal.id, store: source.store, reserved: journal.reserved),
                              started: started)
            batch.restore(journal.entries, finishedAgo: journal.finishedAt.map { .seconds(max(0, now - $0)) })
            batch.log.skip(to: journal.reserved)
            batches.withLock { $0[journal.id] = batch }
            if !batch.isFinished {
                plans.withLock { $0[journal.id] = Plan(request, base: base, accept: definition.accept, requestID: nil) }
            }
            restored += 1
            guard !batch.isFinished else { continue }
            let unfinished = batch.unfinished
            if unfinished.isEmpty {
                batch.endIfDone()  // every item had finished; only the end was lost
            } else {
                start(batch, request, base: base, indices: unfinished, accept: definition.accept, requestID: nil)
            }
        }
        pruneFinished()  // what comes back is held to the same count and bytes as before
        pruneJournals()
        return restored
    }

    /// Journals of batches gone past their retention (or past `maxKept`) are deleted.
    func pruneJournals() {
        source.store.pruneJournals(finishedBefore: ObjectSource.now() - Int64(configuration.retentionSeconds),
                                   keepFinished: configuration.maxKept)
    }

    /// Forgets finished batches past their retention, then the oldest finished ones past
    /// `maxKept` or `maxKeptBytes`. Runs before each new batch and on every keepalive tick,
    /// so kept memory stays within the budget plus the batches running meanwhile.
    func pruneFinished() {
        let now = ContinuousClock.now
        let retention = Duration.seconds(configuration.retentionSeconds)
        var ended: [String] = []
        var removed: [String] = []
        defer {
            specs.withLock { specs in for id in ended { specs[id] = nil } }  // none of their items starts again
            plans.withLock { plans in for id in ended { plans[id] = nil } }  // nor takes items
            // A batch no longer kept in memory is no longer kept across a restart either: the
            // journals stay within the same count and bytes as the batches.
            if !removed.isEmpty { source.store.deleteJournals(ids: removed) }
        }
        batches.withLock { batches in
            var finished: [(id: String, at: ContinuousClock.Instant, started: ContinuousClock.Instant, bytes: Int)] = []
            for (id, batch) in batches {
                guard let at = batch.finishedAt else { continue }
                ended.append(id)
                if now - at >= retention {
                    batches[id] = nil
                    removed.append(id)
                } else {
                    finished.append((id, at, batch.started, batch.retainedBytes))
                }
            }
            var bytes = finished.reduce(0) { $0 + $1.bytes }
            var count = finished.count
            // Restored batches finished in the same second (journals keep whole seconds) go
            // in the order they were created.
            for oldest in finished.sorted(by: { ($0.at, $0.started) < ($1.at, $1.started) }) {
                guard count > configuration.maxKept || bytes > configuration.maxKeptBytes else { break }
                batches[oldest.id] = nil
                removed.append(oldest.id)
                count -= 1
                bytes -= oldest.bytes
            }
        }
    }

    /// Memory held by finished batches (for tests and /stats).
    var keptFinishedBytes: Int {
        batches.withLock { $0.values.filter(\.isFinished).reduce(0) { $0 + $1.retainedBytes } }
    }
}
