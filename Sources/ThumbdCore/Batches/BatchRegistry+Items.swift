import BlobStore
import Foundation
import Logging
import Support
import Synchronization
import Thumbnailer
import Upstream

/// One item of a batch: its parameters, its lookup, and its answer rendered as the item's event.
extension BatchRegistry {
    /// An item with thumbnail parameters of its own.
    static func item(_ parameters: [String: String], accept: String?, avif: Bool, offered: [ImageFormat], presets: Presets,
                     preview: Bool, priority: Priority, inline: Int) throws(ThumbdError) -> Item {
        let parsed = try ThumbnailParameters({ parameters[$0] }, presets: presets)
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
    struct Item {
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

    func start(_ batch: Batch, index: Int, url: String, _ item: Item, requestID: String?) {
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
                                    patient: true, onScreen: batch.isFocused(index), waiter: { settle })
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
    /// or an original) and follows in its own event, unless one was sent already. A `done`
    /// that carries its image inline needs no preview: the tile itself is there.
    func deliver(_ outcome: FlightOutcome, _ item: Item, key: String, to batch: Batch, index: Int, cache: String) {
        switch outcome {
        case .success(let object) where object.status != 200:
            batch.fail(index, error: .upstreamStatus(object.status))
        case .success(let object) where item.preview && object.body.count > item.inline:
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
}
