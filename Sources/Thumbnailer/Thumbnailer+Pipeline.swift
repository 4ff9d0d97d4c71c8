internal import CVips
import Support

/// The steps of one thumbnail, in the order `ThumbnailPlan` describes: cut, resize (where
/// the decoder runs), blur, sharpen, pad or stretch, turn, encode. An animation runs the
/// same steps on each frame, then joins them.
extension Thumbnailer {
    /// Makes the thumbnail `plan` describes, stopped by `control`. With `preview`, a tiny
    /// WebP of the same pixels is made between the resize and the encode (the encode, AVIF
    /// above all, is the slow part) and handed to `preview` before the encode starts: one
    /// decode gives both. A preview that cannot be made is skipped; the thumbnail goes on.
    public func thumbnail(of body: Bytes, _ plan: ThumbnailPlan, control: ResizeControl,
                          preview: ((Thumbnail) -> Void)? = nil) throws(ThumbnailerError) -> Thumbnail {
        if control.isCancelled { throw .cancelled }
        if let eighths = plan.decodeEighths,
           let decoded = try Self.decodeJPEGHere(.body(body), eighths: eighths, orientation: plan.source.orientation,
                                                 control: control) {
            return try make(from: decoded, plan, control: control, preview: preview)
        }
        let loaded = try VipsImageHandle(else: { .notAnImage($0) }) { out in
            body.withUnsafeBytes {
                thumbd_vips_load(plan.source.source.code, $0.baseAddress, $0.count, Int32(plan.loadShrink), Int32(plan.frames), &out)
            }
        }
        guard plan.frames > 1 else { return try make(from: loaded, plan, control: control, preview: preview) }
        return try animation(from: loaded, plan, control: control, preview: preview)
    }

    /// The thumbnail of a JPEG still downloading: the same steps as `thumbnail(of:…)`, with
    /// the decoder reading `feed` as its bytes arrive (it waits when it has caught up), so
    /// that the decode is done soon after the last byte instead of starting then. `plan`
    /// comes from the header of the feed's first bytes. The result is the one the whole body
    /// would give. A feed that fails fails the decode (`notAnImage`); a cancel must end the
    /// feed too, or a decode waiting for bytes would wait for them.
    ///
    /// The decode runs in the calling thread (no libvips worker), at its priority: the
    /// caller chooses it. Only an encode to another format than JPEG uses libvips's workers.
    public func thumbnail(streaming feed: ByteFeed, _ plan: ThumbnailPlan, control: ResizeControl,
                          preview: ((Thumbnail) -> Void)? = nil) throws(ThumbnailerError) -> Thumbnail {
        if control.isCancelled { throw .cancelled }
        guard plan.source.source == .jpeg else { throw .unsupportedFormat }
        if let eighths = plan.decodeEighths {
            // libjpeg itself, reading the feed: nil (CMYK) cannot go back to the loader, whose
            // bytes this read has taken; the caller makes it from the whole body.
            guard let decoded = try Self.decodeJPEGHere(.feed(feed), eighths: eighths, orientation: plan.source.orientation,
                                                        control: control) else { throw .unsupportedFormat }
            return try make(from: decoded, plan, control: control, preview: preview)
        }
        guard let source = FeedSource(feed) else { throw .unsupportedFormat }
        return try withExtendedLifetime(source) { () throws(ThumbnailerError) -> Thumbnail in
            let loaded = try VipsImageHandle(else: { .notAnImage($0) }) { out in
                thumbd_vips_load_jpeg_source(source.raw, Int32(plan.loadShrink), &out)
            }
            return try make(from: loaded, plan, control: control, preview: preview)
        }
    }

    /// One still image: its frame, its preview, its encode. The decode runs in the calling
    /// thread, from a whole body as from a feed: on libvips's workers (one a resize)
    /// the caller only waited, and the hand-offs between the two, strip by strip, left the
    /// cores idle between them (81% busy with 1200x800 thumbnails 8 at once on 2 cores,
    /// 90% in this thread, which makes 6% more a second at 5% less CPU each).
    private func make(from loaded: VipsImageHandle, _ plan: ThumbnailPlan, control: ResizeControl,
                      preview: ((Thumbnail) -> Void)?) throws(ThumbnailerError) -> Thumbnail {
        let final = try frame(loaded, plan, control: control, inThisThread: true)
        if let preview, let tiny = try? Self.preview(of: final) { preview(tiny) }
        return try encode(final, plan, control: control, frames: 1)
    }

    /// Each frame of the tall image libvips loads an animation as, made as a still one is,
    /// then joined with the source's timing.
    private func animation(from loaded: VipsImageHandle, _ plan: ThumbnailPlan, control: ResizeControl,
                           preview: ((Thumbnail) -> Void)?) throws(ThumbnailerError) -> Thumbnail {
        let pageHeight = loaded.height / plan.frames
        guard pageHeight >= 1, pageHeight * plan.frames == loaded.height else {
            throw .notAnImage("an animation of \(plan.frames) frames \(loaded.height) pixels high")
        }
        var frames: [VipsImageHandle] = []
        frames.reserveCapacity(plan.frames)
        for index in 0..<plan.frames {
            if control.isCancelled || control.isExpired { throw control.failure(otherwise: .cancelled) }
            let page = try VipsImageHandle(else: { .notAnImage($0) }) {
                thumbd_vips_frame(loaded.raw, Int32(index), Int32(pageHeight), &$0)
            }
            frames.append(try frame(page, plan, control: control, inThisThread: false))
        }
        if let preview, let tiny = try? Self.preview(of: frames[0]) { preview(tiny) }
        let joined = try VipsImageHandle(else: { .resizeRefused($0) }) { out in
            var raws: [UnsafeMutablePointer<VipsImage>?] = frames.map(\.raw)
            return raws.withUnsafeMutableBufferPointer { thumbd_vips_animation($0.baseAddress, Int32($0.count), loaded.raw, &out) }
        }
        return try encode(joined, plan, control: control, frames: plan.frames)
    }

    /// From a loaded (not yet decoded) image: cut, resize, decode, then the steps after the
    /// resize. The decode runs on libvips's workers, or `inThisThread`.
    private func frame(_ loaded: VipsImageHandle, _ plan: ThumbnailPlan, control: ResizeControl,
                       inThisThread: Bool) throws(ThumbnailerError) -> VipsImageHandle {
        let spec = plan.spec
        var image = loaded
        if let cut = plan.cut(loaded: (loaded.width, loaded.height)) {
            image = try VipsImageHandle(else: { .resizeRefused($0) }) {
                thumbd_vips_crop(loaded.raw, Int32(cut.left), Int32(cut.top), Int32(cut.width), Int32(cut.height), &$0)
            }
        }
        var (size, interesting): (VipsSize, VipsInteresting) = switch plan.resize {
        case .exact: (VIPS_SIZE_FORCE, VIPS_INTERESTING_NONE)
        case .inside: (VIPS_SIZE_BOTH, VIPS_INTERESTING_NONE)
        case .down: (VIPS_SIZE_DOWN, VIPS_INTERESTING_NONE)
        case .attention: (VIPS_SIZE_BOTH, VIPS_INTERESTING_ATTENTION)
        }
        var target = plan.box
        // libjpeg rounds each scaled side up on its own: the size comes from the plan.
        if plan.decodeEighths != nil, plan.resize == .inside || plan.resize == .down {
            (size, target) = (VIPS_SIZE_FORCE, plan.resized)
        }
        let resized = try VipsImageHandle(else: { .resizeRefused($0) }) { [image, target] in
            thumbd_vips_resize(image.raw, Int32(target.width), Int32(target.height), Int32(size.rawValue),
                               Int32(interesting.rawValue), &$0)
        }
        // The decoder runs here, tile by tile (or strip by strip), under the control.
        var final: VipsImageHandle
        if inThisThread {
            final = try VipsImageHandle(else: { control.failure(otherwise: .notAnImage($0)) }) {
                thumbd_vips_materialize_here(resized.raw, control.raw, &$0)
            }
        } else {
            control.watch(resized.raw)
            final = try VipsImageHandle(else: { control.failure(otherwise: .notAnImage($0)) }) {
                thumbd_vips_materialize(resized.raw, &$0)
            }
        }
        if let sigma = spec.blur {
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in thumbd_vips_blur(final.raw, sigma, &$0) }
        }
        if let sigma = spec.sharpen {
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in thumbd_vips_sharpen(final.raw, sigma, &$0) }
        }
        switch plan.finish {
        case .pad where final.width != plan.box.width || final.height != plan.box.height:
            let colour: [Double] = if let background = spec.background {
                [Double(background.red), Double(background.green), Double(background.blue), 255]
            } else if spec.format.hasAlpha {
                [0, 0, 0, 0]
            } else {
                [255, 255, 255, 255]
            }
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] out in
                colour.withUnsafeBufferPointer {
                    thumbd_vips_pad(final.raw, Int32(plan.box.width), Int32(plan.box.height), $0.baseAddress, &out)
                }
            }
        case .stretch where final.width != plan.box.width || final.height != plan.box.height:
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in
                thumbd_vips_stretch(final.raw, Int32(plan.box.width), Int32(plan.box.height), &$0)
            }
        default:
            break
        }
        if spec.rotate != 0 {
            final = try VipsImageHandle(else: { .resizeRefused($0) }) { [final] in
                thumbd_vips_rotate(final.raw, Int32(spec.rotate), &$0)
            }
        }
        guard final.width * final.height <= configuration.maxOutputPixels else {
            throw .outputTooLarge(width: final.width, height: final.height, limit: configuration.maxOutputPixels)
        }
        return final
    }

    /// Encodes `image` (whose steps after the resize run here, watched by `control`).
    private func encode(_ image: VipsImageHandle, _ plan: ThumbnailPlan, control: ResizeControl,
                        frames: Int) throws(ThumbnailerError) -> Thumbnail {
        let spec = plan.spec
        if Self.canEncodeHere(image, spec.format, frames: frames) {
            let bytes = try Self.encodeJPEGHere(image, quality: spec.quality, progressive: spec.progressive, control: control)
            return Thumbnail(body: bytes, format: spec.format, width: image.width, height: image.height, frames: 1)
        }
        control.watch(image.raw)
        let flatten = spec.background ?? .white
        let colour = [Double(flatten.red), Double(flatten.green), Double(flatten.blue)]
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let rc = colour.withUnsafeBufferPointer {
            thumbd_vips_save(image.raw, spec.format.code, Int32(spec.quality), spec.progressive ? 1 : 0, $0.baseAddress,
                             &buffer, &length)
        }
        guard rc == 0, let buffer else { throw control.failure(otherwise: .failed(Self.takeError())) }
        defer { thumbd_vips_free(buffer) }
        let bytes = Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length))
        return Thumbnail(body: bytes, format: spec.format, width: image.width, height: image.height / frames, frames: frames)
    }

    /// A preview of decoded pixels (the tile's, already small): resized to fit
    /// `previewBox`, encoded as WebP.
    private static func preview(of image: VipsImageHandle) throws(ThumbnailerError) -> Thumbnail {
        let tiny = try VipsImageHandle(else: { .resizeRefused($0) }) {
            thumbd_vips_resize(image.raw, Int32(previewBox), Int32(previewBox), Int32(VIPS_SIZE_BOTH.rawValue),
                               Int32(VIPS_INTERESTING_NONE.rawValue), &$0)
        }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let white = [255.0, 255, 255]
        let rc = white.withUnsafeBufferPointer {
            thumbd_vips_save(tiny.raw, ImageFormat.webp.code, Int32(previewQuality), 0, $0.baseAddress, &buffer, &length)
        }
        guard rc == 0, let buffer else { throw .failed(takeError()) }
        defer { thumbd_vips_free(buffer) }
        return Thumbnail(body: Bytes(copying: UnsafeRawBufferPointer(start: buffer, count: length)), format: .webp,
                         width: tiny.width, height: tiny.height)
    }
}
