import BlobStore
import Foundation
import Support
import Synchronization
import Thumbnailer
import Upstream

/// The tiny previews a batch posted with `"preview": true` paints before its tiles load. A
/// preview is made from the same decode as its tile (`Thumbnailer.thumbnail(…, preview:)`,
/// between the resize and the encode), or, for an image already cached without one, from
/// that cached image (a tile, so a few kilobytes to decode); either way it is stored beside
/// the image, in its family (`<key>#preview`, purged and expiring with it), so a batch of
/// cached items makes none. It never delays its tile: a `done` goes out when the tile is
/// ready, with the preview if it is stored, else the preview follows in its own event.
enum Previews {
    /// A larger preview is not sent (a data URI in an event must stay small).
    static let maxBytes = 600

    /// Where the preview of the image stored at `key` is kept. Cache keys are URLs without a
    /// fragment (and variants' `#thumb:` keys), so no other key ends so.
    static func key(of key: String) -> String { key + "#preview" }

    static func dataURI(_ body: Bytes) -> String? {
        let uri = "data:image/webp;base64," + Data(body.array).base64EncodedString()
        return uri.utf8.count <= maxBytes ? uri : nil
    }

    /// The stored preview of the image at `key`, as a data URI; nil when none is kept.
    static func stored(of key: String, in source: ObjectSource) -> String? {
        guard let object = source.fresh(Self.key(of: key)), object.status == 200 else { return nil }
        source.store.recordAccess(object.key)
        return dataURI(object.body)
    }

    /// Stores `preview` beside `image` (its URL's family, its lifetime).
    static func store(_ preview: Bytes, of image: CachedObject, in store: CacheStore) {
        let object = CachedObject(
            key: key(of: image.key), url: image.url, status: 200, contentType: "image/webp", body: preview,
            etag: ObjectSource.etag(of: preview), upstreamETag: image.etag, lastModified: image.lastModified,
            fetchedAt: image.fetchedAt, expiresAt: image.expiresAt, graceSeconds: image.graceSeconds)
        store.insert(object) { _ in }  // a failed insert is logged by the store; the next batch makes it again
    }

    /// Makes the preview of an image that is cached without one, in the resize lane at low
    /// priority, and stores it. `done` gets the data URI (nil when none could be made: refused,
    /// queue full, too slow, too large, or nobody wants it any more by the time it would start:
    /// `wanted`) exactly once.
    static func make(from image: CachedObject, _ variants: VariantSource, wanted: @escaping @Sendable () -> Bool = { true },
                     done: @escaping @Sendable (String?) -> Void) {
        var spec = ThumbnailSpec(width: Thumbnailer.previewBox, height: Thumbnailer.previewBox, fit: .inside, format: .webp,
                                 quality: Thumbnailer.previewQuality)
        spec.animated = false  // a preview is a still, a few hundred bytes
        let thumbnailer = variants.thumbnailer
        guard let plan = try? thumbnailer.plan(thumbnailer.header(of: image.body), spec) else { return done(nil) }
        let once = Atomic<Bool>(false)
        let finish: @Sendable (String?) -> Void = { uri in
            if !once.exchange(true, ordering: .relaxed) { done(uri) }
        }
        let store = variants.source.store
        let task = variants.lane.submit(cost: plan.estimatedBytes, urgency: Urgency(.low)) { control in
            guard wanted() else { return finish(nil) }  // its batch was cancelled while it waited
            guard let tiny = try? thumbnailer.thumbnail(of: image.body, plan, control: control) else { return finish(nil) }
            let uri = dataURI(tiny.body)
            if uri != nil { Self.store(tiny.body, of: image, in: store) }
            finish(uri)
        } dropped: { _ in
            finish(nil)
        } timedOut: {
            finish(nil)
        }
        if task == nil { finish(nil) }
    }
}
