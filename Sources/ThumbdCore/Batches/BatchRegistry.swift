import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// Every batch, running or recently finished. Starts each item on the same fetcher and
/// coalescer as `/thumb`; sends keepalives to idle streams; forgets finished batches after
/// `retentionSeconds`.
final class BatchRegistry: Sendable {
    private let batches = Mutex<[String: Batch]>([:])
    private let configuration: BatchConfiguration
    private let source: ObjectSource
    private let variants: VariantSource
    private let policy: DestinationPolicy
    private let queue = DispatchQueue(label: "thumbd.batches")
    private let timer: TimerBox
    /// The lanes that write events to many streams at once; stopped with the registry.
    private let delivery = Delivery()
    private let signer: URLSigner
    /// Every open event stream, whether or not its batch is still kept: keepalives reach a
    /// stream whose batch was dropped (retention, or the kept-memory budget) until it ends.
    private let streams = Mutex<[ObjectIdentifier: EventSubscriber]>([:])
    /// What each item of a kept batch asks for, to start it again when it comes back on
    /// screen after it was cancelled off it.
    private let specs = Mutex<[String: [Int: Item]]>([:])

    init(configuration: BatchConfiguration, source: ObjectSource, variants: VariantSource, policy: DestinationPolicy,
         signer: URLSigner = URLSigner(keys: [])) {
        self.signer = signer
        self.configuration = configuration
        self.source = source
        self.variants = variants
        self.policy = policy
        let timer = DispatchSource.makeTimerSource(queue: queue)
        self.timer = TimerBox(timer)
        let interval = DispatchTimeInterval.milliseconds(Int(configuration.keepaliveSeconds * 1000))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
    }

    /// Open event streams (for tests, metrics and shutdown).
    var openStreams: Int { streams.withLock { $0.count } }

    /// Batches still running, and all kept (running or recently finished).
    var counts: (running: Int, kept: Int) {
        batches.withLock { batches in (batches.values.filter { !$0.isFinished }.count, batches.count) }
    }

    /// `accept` resolves `format=auto` for every item (the POST's Accept). `body`: the POST's
    /// body, recorded in the batch's journal so that the batch survives a restart.
    func create(_ request: BatchRequest, accept: String? = nil, requestID: String? = nil,
                body: Bytes? = nil) throws(ThumbdError) -> Batch {
        let base = try baseItem(of: request, accept: accept)
        var generator = SystemRandomNumberGenerator()
        let id = (0..<2).map { _ in String(generator.next() as UInt64, radix: 16).leftPadded(to: 16) }.joined()
        let journal = body.map { _ in BatchJournal.new(id: id, store: source.store) }
        let batch = Batch(id: id, items: request.items,
                          progressInterval: .milliseconds(configuration.progressIntervalMilliseconds), delivery: delivery,
                          cancelOffscreen: request.cancelOffscreen, yieldsOffscreen: yieldsOffscreen(request), journal: journal)
        pruneFinished()
        let admitted = batches.withLock { batches -> Bool in
            guard batches.values.filter({ !$0.isFinished }).count < configuration.maxOpen else { return false }
            batches[id] = batch
            return true
        }
        guard admitted else {
            throw .unavailable(.tooManyBatches, "\(configuration.maxOpen) batches are running already")
        }
        if let journal, let body {
            journal.begin(.init(body: String(decoding: body.array, as: UTF8.self), accept: accept,
                                fromOwnPage: request.fromOwnPage ? true : nil), createdAt: ObjectSource.now())
        }
        // What is on screen starts first, carrying the focus; the rest waits until the screen
        // is done (at most batches.screenFirstMilliseconds), so that the first screen has the
        // network and the cores to itself, as a browser holds back its images off screen.
        batch.startDeferred.set { [weak self, weak batch] indices in
            guard let self, let batch else { return }
            start(batch, request, base: base, indices: indices, accept: accept, requestID: requestID)
        }
        if !request.focus.isEmpty { _ = batch.focus(Set(request.focus)) }  // nothing started yet: nothing yields
        let focused = Set(request.focus)
        let offscreen = request.items.indices.filter { !focused.contains($0) }
        start(batch, request, base: base, indices: request.focus, accept: accept, requestID: requestID)
        if request.focus.isEmpty || configuration.screenFirstMilliseconds == 0 {
            start(batch, request, base: base, indices: offscreen, accept: accept, requestID: requestID)
        } else {
            batch.deferUntilScreenDone(offscreen)
            queue.asyncAfter(deadline: .now() + .milliseconds(configuration.screenFirstMilliseconds)) { [weak batch] in
                batch?.releaseDeferred()
            }
        }
        return batch
    }

    /// What every item asks for unless it says otherwise; throws for the whole batch.
    private func baseItem(of request: BatchRequest, accept: String?) throws(ThumbdError) -> Item {
        if request.thumbnail?.format == .fixed(.avif) && !variants.thumbnailer.canEncodeAVIF {
            throw .badRequest(.badParameter, "format=avif is not available: this libvips cannot encode AVIF")
        }
        let variant = try request.thumbnail?.resolved(accept: accept, offered: variants.autoFormats)
        let query = request.thumbnailQuery.map { "&\($0)=\(QueryValue.encode($1))" }.joined()
        return Item(variant: variant, query: query, preview: request.preview, priority: request.priority,
                    inline: request.inline ? configuration.maxInlineBytes : 0)
    }

    /// Starts `indices` of `batch`, each with its own parameters and signature; an item
    /// whose are wrong fails alone.
    private func start(_ batch: Batch, _ request: BatchRequest, base: Item, indices: [Int], accept: String?, requestID: String?) {
        let avif = variants.thumbnailer.canEncodeAVIF
        for index in indices {
            let entry = request.items[index]
            let own = index < request.itemParameters.count ? request.itemParameters[index] : [:]
            // Signed URLs: each item is signed as the /thumb request its src names, and its
            // src carries the signature; a wrong one fails this item only.
            var signature = ""
            if signer.isEnabled {
                let merged = request.parameters.merging(own) { $1 }
                var sig = index < request.itemSignatures.count ? request.itemSignatures[index] : nil
                // thumbd's own page holds no key: the daemon signs what it asks for.
                if sig == nil, request.fromOwnPage { sig = signer.signature { $0 == "url" ? entry.url : merged[$0] } }
                guard let sig, signer.verify(sig, { $0 == "url" ? entry.url : merged[$0] }) else {
                    batch.fail(index, error: ThumbdError(.badSignature, "sig is missing or wrong for this item"))
                    continue
                }
                signature = "&sig=" + QueryValue.encode(sig)
            }
            let spec: Item
            if own.isEmpty {
                spec = base.signed(signature)
            } else {
                // This item's parameters win over the batch's; bad ones fail this item only.
                do {
                    try ParameterNames.check(own.keys, known: ParameterNames.batchItem)
                    let merged = request.parameters.merging(own) { $1 }
                    spec = try Self.item(merged, accept: accept, avif: avif, offered: variants.autoFormats, preview: request.preview,
                                         priority: request.priority, inline: base.inline)
                        .signed(signature)
                } catch {
                    batch.fail(index, error: error)
                    continue
                }
            }
            specs.withLock { $0[batch.id, default: [:]][index] = spec }
            start(batch, index: index, url: entry.url, spec, requestID: requestID)
        }
    }

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
                  var request = try? BatchRequest(body: Bytes(Array(definition.body.utf8)), maxItems: configuration.maxItems),
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
                              progressInterval: .milliseconds(configuration.progressIntervalMilliseconds), delivery: delivery,
                              cancelOffscreen: request.cancelOffscreen,
                              yieldsOffscreen: yieldsOffscreen(request),
                              journal: BatchJournal(id: journal.id, store: source.store, reserved: journal.reserved),
                              started: started)
            batch.restore(journal.entries, finishedAgo: journal.finishedAt.map { .seconds(max(0, now - $0)) })
            batch.log.skip(to: journal.reserved)
            batches.withLock { $0[journal.id] = batch }
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
    private func pruneJournals() {
        source.store.pruneJournals(finishedBefore: ObjectSource.now() - Int64(configuration.retentionSeconds),
                                   keepFinished: configuration.maxKept)
    }

    func batch(_ id: String) -> Batch? { batches.withLock { $0[id] } }

    /// Cancels what is still queued or in flight. A transfer others still wait for goes on.
    func cancel(_ batch: Batch) {
        let lookup = Lookup(source: source, variants: variants)
        for ticket in batch.cancel() { lookup.leave(ticket) }
    }

    /// Whether a batch's items that leave the screen early give way to the new one: with
    /// screen first (a focus, and `batches.screenFirstMilliseconds` above 0).
    private func yieldsOffscreen(_ request: BatchRequest) -> Bool {
        !request.focus.isEmpty && configuration.screenFirstMilliseconds > 0
    }

    /// `POST /batches/<id>/focus`: these items are on screen now. Their jobs go to the head
    /// of their queues; items cancelled off screen that came back start again; with
    /// `cancelOffscreen`, those that left are cancelled once they have been away
    /// `offscreenCancelSeconds` (checked then, on the registry's queue).
    func focus(_ batch: Batch, on indices: [Int]) {
        let change = batch.focus(Set(indices))
        if !change.yielded.isEmpty {
            let lookup = Lookup(source: source, variants: variants)
            for ticket in change.yielded { lookup.leave(ticket) }
            // They wait for the new screen, at most screenFirstMilliseconds, as at the start.
            queue.asyncAfter(deadline: .now() + .milliseconds(configuration.screenFirstMilliseconds)) { [weak batch] in
                batch?.releaseDeferred()
            }
        }
        for index in change.back {
            guard let spec = specs.withLock({ $0[batch.id]?[index] }) else { continue }
            start(batch, index: index, url: batch.url(of: index), spec, requestID: nil)
        }
        guard batch.cancelOffscreen else { return }
        let after = Duration.seconds(configuration.offscreenCancelSeconds)
        queue.asyncAfter(deadline: .now() + configuration.offscreenCancelSeconds) { [weak self, weak batch] in
            guard let self, let batch else { return }
            let lookup = Lookup(source: source, variants: variants)
            for ticket in batch.cancelOffscreen(after: after) { lookup.leave(ticket) }
        }
    }

    func subscribe(_ batch: Batch, lastEventID: Int?) -> EventSubscriber {
        let subscriber = EventSubscriber(log: batch.log, lastEventID: lastEventID, retryMilliseconds: configuration.retryMilliseconds) {
            [weak self] id in _ = self?.streams.withLock { $0.removeValue(forKey: id) }
        }
        streams.withLock { $0[ObjectIdentifier(subscriber)] = subscriber }
        return subscriber
    }

    /// Shutdown: wake every stream so it ends (the server refuses to suspend it again).
    func closeStreams() {
        timer.cancel()
        // Each one sends what it has left; then, with nothing more, the server ends it after
        // its `shutdown` event (`EventSubscriber.lastWords`).
        for subscriber in streams.withLock({ Array($0.values) }) { subscriber.wake() }
    }

    /// Shutdown, before transfers are aborted: the batches' journals record nothing more, so
    /// that the items the shutdown cuts short start again after the restart.
    func stopRecording() {
        for batch in batches.withLock({ Array($0.values) }) { batch.journal?.close() }
    }

    /// After the server has stopped: ends the delivery lanes.
    func stop() {
        timer.cancel()
        delivery.stop()
    }

    /// An item with thumbnail parameters of its own.
    private static func item(_ parameters: [String: String], accept: String?, avif: Bool, offered: [ImageFormat],
                             preview: Bool, priority: Priority, inline: Int) throws(ThumbdError) -> Item {
        let parsed = try ThumbnailParameters { parameters[$0] }
        if parsed?.format == .fixed(.avif) && !avif {
            throw .badRequest(.badParameter, "format=avif is not available: this libvips cannot encode AVIF")
        }
        let query = ThumbnailParameters.names.compactMap { name in
            parameters[name].map { "&\(name)=\(QueryValue.encode($0))" }
        }.joined()
        return Item(variant: try parsed?.resolved(accept: accept, offered: offered), query: query, preview: preview, priority: priority,
                    inline: inline)
    }

    /// What every item of a batch asks for.
    private struct Item {
        var variant: Variant?
        var query: String
        var preview: Bool
        var priority: Priority
        /// The largest image sent inside `done` (0: none).
        var inline: Int

        /// The same, with `&sig=…` (or nothing) at the end of its src's query.
        func signed(_ signature: String) -> Item {
            var item = self
            item.query += signature
            return item
        }
    }

    private func start(_ batch: Batch, index: Int, url: String, _ item: Item, requestID: String?) {
        let destination: DestinationPolicy.Destination
        do {
            destination = try policy.validate(url.isEmpty ? nil : url)
        } catch {
            batch.fail(index, error: error)
            return
        }
        batch.setSource(index, src: "/thumb?url=" + QueryValue.encode(destination.url) + item.query)
        let target: LookupTarget = item.variant.map { .variant($0, of: destination) } ?? .original(destination)
        let key = target.key
        let counters = source.counters
        let lookup = Lookup(source: source, variants: variants)
        let settle: Lookup.Waiter = { [self] outcome, role, stale in
            switch Settled(outcome, role: role, stale: stale) {
            case .object(let object, let result):
                counters.count(result)
                deliver(.success(object), item, key: key, to: batch, index: index, cache: result.rawValue)
            case .stale(let stale):  // the origin failed: the expired copy, as /thumb answers
                counters.count(.stale)
                deliver(.success(stale), item, key: key, to: batch, index: index, cache: CacheResult.stale.rawValue)
            case .failure(let error, let result):
                counters.count(result)
                batch.fail(index, error: error)
            }
        }
        let answer = lookup.request(target, priority: item.priority, requestID: requestID, preview: item.preview,
                                    patient: true, onScreen: batch.isFocused(index), waiter: settle)
        switch answer {
        case .hit(let stored):
            counters.count(.hit)
            deliver(.success(stored), item, key: key, to: batch, index: index, cache: "hit")
        case .stale(let stale):
            // Within its grace, as for /thumb: the tile now, one refresh behind it.
            counters.count(.stale)
            deliver(.success(stale), item, key: key, to: batch, index: index, cache: "stale")
        case .ready(let ready, let stale):  // finished a moment ago, still being stored: a hit
            settle(ready, .finished, stale)
        case .waiting(let ticket, let progress, let urgencies, let resize):
            batch.attach(index, ticket: ticket, job: progress, urgencies: urgencies)
            // The preview made from the resize's decode, as soon as it exists (before `done`).
            if item.preview, let resize {
                resize.observePreview { [weak batch] uri in batch?.preview(index, uri) }
            }
        }
    }

    /// Answers the item. With previews, `done` carries the stored preview when there is one;
    /// else `done` goes at once and a preview is made from the image just delivered (a tile,
    /// or an original) and follows in its own event, unless one was sent already.
    private func deliver(_ outcome: FlightOutcome, _ item: Item, key: String, to batch: Batch, index: Int, cache: String) {
        switch outcome {
        case .success(let object) where object.status != 200:
            batch.fail(index, error: .upstreamStatus(object.status))
        case .success(let object) where item.preview:
            let stored = batch.previewSent(index) ? nil : Previews.stored(of: key, in: source)
            let make = stored == nil && !batch.previewSent(index)
            if make { batch.expectPreview() }  // `end` waits for it; `done` does not
            batch.succeed(index, object: object, cache: cache, preview: stored, inline: item.inline)
            guard make else { return }
            Previews.make(from: object, variants, wanted: { [weak batch] in batch?.awaitsPreviews ?? false }) { [weak batch] uri in
                batch?.previewFinished(index, uri)
            }
        case .success(let object):
            batch.succeed(index, object: object, cache: cache, inline: item.inline)
        case .failure(let error):
            batch.fail(index, error: error)
        }
    }

    /// Forgets finished batches past their retention, then the oldest finished ones past
    /// `maxKept` or `maxKeptBytes`. Runs before each new batch and on every keepalive tick,
    /// so kept memory stays within the budget plus the batches running meanwhile.
    private func pruneFinished() {
        let now = ContinuousClock.now
        let retention = Duration.seconds(configuration.retentionSeconds)
        var ended: [String] = []
        var removed: [String] = []
        defer {
            specs.withLock { specs in for id in ended { specs[id] = nil } }  // none of their items starts again
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

    private func tick() {
        pruneFinished()
        pruneJournals()
        delivery.wake(streams.withLock { Array($0.values) }, keepalive: true)
    }
}

/// The keepalive timer: set up once, cancelled once; Dispatch sources are thread-safe.
private final class TimerBox: @unchecked Sendable {
    private let timer: any DispatchSourceTimer
    init(_ timer: any DispatchSourceTimer) { self.timer = timer }
    func cancel() { timer.cancel() }
    deinit { timer.cancel() }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}
