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
    let batches = Mutex<[String: Batch]>([:])
    let configuration: BatchConfiguration
    let source: ObjectSource
    let variants: VariantSource
    let policy: DestinationPolicy
    let queue = DispatchQueue(label: "thumbd.batches")
    /// The keepalive timer, from `start()` on.
    private let timer = Slot<TimerBox>()
    let signer: URLSigner
    /// Every open event stream (keepalives and the shutdown reach them through it).
    let streams: EventStreams
    /// What each item of a kept batch asks for, to start it again when it comes back on
    /// screen after it was cancelled off it.
    let specs = Mutex<[String: [Int: Item]]>([:])
    /// What each running batch's items ask for (BatchRegistry+Added.swift).
    let plans = Mutex<[String: Plan]>([:])

    init(configuration: BatchConfiguration, source: ObjectSource, variants: VariantSource, policy: DestinationPolicy,
         signer: URLSigner = URLSigner(keys: [])) {
        self.signer = signer
        self.configuration = configuration
        self.source = source
        self.variants = variants
        self.policy = policy
        self.streams = EventStreams(retryMilliseconds: configuration.retryMilliseconds)
    }

    /// Starts the keepalive timer; once.
    func start() {
        guard timer.value == nil else { return }
        let source = DispatchSource.makeTimerSource(queue: queue)
        let interval = DispatchTimeInterval.milliseconds(Int(configuration.keepaliveSeconds * 1000))
        source.schedule(deadline: .now() + interval, repeating: interval)
        source.setEventHandler { [weak self] in self?.tick() }
        timer.set(TimerBox(source))
        source.resume()
    }

    /// Open event streams (for tests, metrics and shutdown).
    var openStreams: Int { streams.count }

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
                          progressInterval: .milliseconds(configuration.progressIntervalMilliseconds),
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
        let plan = Plan(request, base: base, accept: accept, requestID: requestID)
        plans.withLock { $0[id] = plan }
        batch.startDeferred.set { [weak self, weak batch] indices in
            guard let self, let batch else { return }
            start(batch, plan.request.withLock { $0 }, base: base, indices: indices, accept: accept, requestID: requestID)
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
    func baseItem(of request: BatchRequest, accept: String?) throws(ThumbdError) -> Item {
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
    func start(_ batch: Batch, _ request: BatchRequest, base: Item, indices: [Int], accept: String?, requestID: String?) {
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
                    spec = try Self.item(merged, accept: accept, avif: avif, offered: variants.autoFormats, presets: variants.presets,
                                         preview: request.preview,
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

    func batch(_ id: String) -> Batch? { batches.withLock { $0[id] } }

    /// Cancels what is still queued or in flight. A transfer others still wait for goes on.
    func cancel(_ batch: Batch) {
        let lookup = Lookup(source: source, variants: variants)
        for ticket in batch.cancel() { lookup.leave(ticket) }
    }

    /// Whether a batch's items that leave the screen early give way to the new one: with
    /// screen first (a focus, and `batches.screenFirstMilliseconds` above 0).
    func yieldsOffscreen(_ request: BatchRequest) -> Bool {
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
        streams.subscribe(batch.log, lastEventID: lastEventID)
    }

    /// Shutdown: wake every stream so it ends (the server refuses to suspend it again).
    func closeStreams() {
        timer.value?.cancel()
        // Each one sends what it has left; then, with nothing more, the server ends it after
        // its `shutdown` event (`EventSubscriber.lastWords`).
        for subscriber in streams.subscribers { subscriber.wake() }
    }

    /// Shutdown, before transfers are aborted: the batches' journals record nothing more, so
    /// that the items the shutdown cuts short start again after the restart.
    func stopRecording() {
        for batch in batches.withLock({ Array($0.values) }) { batch.journal?.close() }
    }

    /// After the server has stopped: no more keepalives.
    func stop() {
        timer.value?.cancel()
    }

    func tick() {
        pruneFinished()
        pruneJournals()
        for subscriber in streams.subscribers {
            subscriber.requestKeepalive()
            subscriber.wake()
        }
    }
}

/// The keepalive timer: set up once, cancelled once; Dispatch sources are thread-safe.
private final class TimerBox: @unchecked Sendable {  // Dispatch sources are thread-safe
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
