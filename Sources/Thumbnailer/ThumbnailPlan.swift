/// What a thumbnail will cost, decided from the header before any pixel is decoded: the
/// decode shrink, the cut, every intermediate size, the output, the frames of an animation,
/// and an estimate of the memory the whole pipeline holds at its peak. What cannot be
/// bounded is refused here.
///
/// The pipeline, in order: `crop` (a rectangle of the upright source) → the cut `cover`
/// keeps, placed by the gravity → resize → blur, sharpen → pad (`contain`) or stretch
/// (`fill`) → `rotate` → encode. Everything up to the resize is measured in the upright
/// source (EXIF orientation applied) and mapped once into the decoder's own frame, so the
/// image is never turned before it is small.
///
/// `cover` crops *before* it resizes: the source is cut to the box's aspect ratio first, so a
/// 1×20000 image asked at 256×256 costs a 1×1 crop enlarged to 256×256, not a
/// 256×5,120,000 intermediate cropped afterwards (what libvips's own thumbnail does).
/// `attention` needs the whole image scaled first; its intermediate is bounded by
/// `maxOutputPixels`, and refused beyond.
public struct ThumbnailPlan: Sendable, Equatable {
    public typealias Rect = Region

    public enum Resize: Sendable, Equatable {
        /// Exactly the box (after a cut to its aspect ratio).
        case exact
        /// Inside the box, enlarged when smaller (contain and fill, before the pad or stretch).
        case inside
        /// Inside the box, never enlarged.
        case down
        /// Cover the box, then keep its most interesting part (libvips's smart crop).
        case attention
    }

    /// What comes after the resize.
    public enum Finish: Sendable, Equatable {
        case none, pad, stretch
    }

    public struct Limits: Sendable, Equatable {
        /// Pixels of the source; for an animation kept animated, summed over its frames.
        public var maxSourcePixels: Int
        public var maxOutputPixels: Int
        /// One resize's estimated memory may not be more than this (the whole budget).
        public var maxMemoryBytes: Int
        /// AVIF's encoder is one call that cannot be stopped: its size is bounded instead.
        public var maxAVIFPixels: Int
        /// An animation with more frames is made from its first frame alone.
        public var maxFrames: Int

        public init(maxSourcePixels: Int, maxOutputPixels: Int, maxMemoryBytes: Int, maxAVIFPixels: Int, maxFrames: Int = 1) {
            self.maxSourcePixels = maxSourcePixels
            self.maxOutputPixels = maxOutputPixels
            self.maxMemoryBytes = maxMemoryBytes
            self.maxAVIFPixels = maxAVIFPixels
            self.maxFrames = maxFrames
        }

        /// Whether an image with `header` is kept animated in a format that can animate.
        public func animates(_ header: ImageHeader) -> Bool {
            header.pages > 1 && header.pages <= maxFrames && header.pixels * header.pages <= maxSourcePixels
                && (header.source == .gif || header.source == .webp)
        }
    }

    public let source: ImageHeader
    public let spec: ThumbnailSpec
    /// libjpeg's decode shrink (1, 2, 4 or 8) in libvips's loader.
    public let loadShrink: Int
    /// The scale, in eighths (1–7), a still JPEG (grey or colour) is decoded at by libjpeg
    /// itself, in the resize's thread, when the whole decoded image is no larger than
    /// `maxOutputPixels` (the loader streams its rows; this holds them all). nil: the loader
    /// decodes it, at `loadShrink` (whole size, CMYK, alpha, animations, larger images).
    public let decodeEighths: Int?
    /// The cut of the loaded image, in its own (not yet rotated) frame, estimated from the
    /// header; the cut made is `cut(loaded:)` of the image actually loaded (the decoder's
    /// shrink may round the other way).
    public let crop: Rect?
    /// `spec.crop` within the upright source (nil: the whole image).
    public let region: Rect?
    /// The aspect ratio `cover` cuts to, in the upright frame (nil: no cut to a ratio).
    public let coverAspect: (width: Int, height: Int)?
    /// The box the resize is given (before `rotate`), and how it meets it.
    public let box: (width: Int, height: Int)
    public let resize: Resize
    /// The size the resize gives (before a pad, a stretch or `rotate`). libjpeg's scaled
    /// sides are rounded up each on its own (300×600 at 3/8 is 113×225), so an image it
    /// decodes is resized to this size exactly, from the source's own ratio.
    public let resized: (width: Int, height: Int)
    public let finish: Finish
    /// The size of the thumbnail (after `rotate`).
    public let output: (width: Int, height: Int)
    /// Frames made: the source's when it stays animated, else 1.
    public let frames: Int
    /// The largest image the pipeline holds whole at once, in pixels.
    public let intermediatePixels: Int
    /// The memory the pipeline is expected to hold at its peak, in bytes.
    public let estimatedBytes: Int

    public static func == (lhs: ThumbnailPlan, rhs: ThumbnailPlan) -> Bool {
        lhs.source == rhs.source && lhs.spec == rhs.spec && lhs.loadShrink == rhs.loadShrink
            && lhs.decodeEighths == rhs.decodeEighths && lhs.crop == rhs.crop
            && lhs.region == rhs.region
            && lhs.coverAspect.map { [$0.width, $0.height] } == rhs.coverAspect.map { [$0.width, $0.height] }
            && lhs.box == rhs.box && lhs.resize == rhs.resize && lhs.resized == rhs.resized && lhs.finish == rhs.finish
            && lhs.output == rhs.output
            && lhs.frames == rhs.frames && lhs.intermediatePixels == rhs.intermediatePixels
            && lhs.estimatedBytes == rhs.estimatedBytes
    }

    /// Every band counted as 4 bytes (RGBA, 8 bits): the pipeline's images after decode.
    static let bytesPerPixel = 4
    /// Rows a decoder that streams (JPEG, PNG) holds while the resize reads them.
    static let streamingRows = 256
    /// What every resize holds whatever its size (libvips's objects, buffers, a thread).
    static let baseBytes = 2 << 20
    /// A blur or sharpen may multiply at most this many times per pixel of the largest
    /// thumbnail (`maxOutputPixels`): its cost grows with the sigma times the pixels.
    static let filterTapsPerOutputPixel = 64
    /// The blur and sharpen sigmas allowed.
    public static let sigmas = 0.3...100.0

    public init(source: ImageHeader, spec: ThumbnailSpec, limits: Limits) throws(ThumbnailerError) {
        let frames = spec.animated && spec.format.canAnimate && limits.animates(source) ? source.pages : 1
        guard source.pixels * frames <= limits.maxSourcePixels else {
            throw .tooManyPixels(width: source.width, height: source.height, limit: limits.maxSourcePixels)
        }
        if let width = spec.width, let height = spec.height, width * height > limits.maxOutputPixels {
            throw .outputTooLarge(width: width, height: height, limit: limits.maxOutputPixels)
        }
        self.source = source
        self.spec = spec
        self.frames = frames
        let upright = source.upright
        region = try Self.region(spec.crop, in: upright)
        let area = (width: region?.width ?? upright.width, height: region?.height ?? upright.height)
        // The box before the quarter turn: the output's width is the box's height then.
        let turns = spec.rotate == 90 || spec.rotate == 270
        let (boxWidth, boxHeight) = turns ? (spec.height, spec.width) : (spec.width, spec.height)
        let shrink = source.source == .jpeg
            ? Self.jpegShrink(area: area, width: boxWidth, height: boxHeight, fit: spec.fit) : 1
        loadShrink = shrink
        var eighths = source.source == .jpeg && frames == 1 && (source.bands == 1 || source.bands == 3)
            ? Self.jpegEighths(area: area, width: boxWidth, height: boxHeight, fit: spec.fit) : nil
        // libjpeg's own scale holds the whole decoded image (the loader streams it): no larger
        // than any intermediate image may be.
        if let scale = eighths,
           Self.divideUp(source.width * scale, 8) * Self.divideUp(source.height * scale, 8) > limits.maxOutputPixels {
            eighths = nil
        }
        decodeEighths = eighths
        // A side as decoded: libjpeg rounds a scaled side up.
        let decoded = { (side: Int) -> Int in eighths.map { Self.divideUp(side * $0, 8) } ?? Self.divideUp(side, shrink) }
        let loaded = (width: decoded(area.width), height: decoded(area.height))
        // The ratio a fit keeps: the source's own when libjpeg scales it (see `resized`).
        let kept = eighths == nil ? loaded : area
        var aspect: (width: Int, height: Int)?
        var intermediate = 0
        var made: (width: Int, height: Int)
        switch (boxWidth == nil || boxHeight == nil ? Fit.inside : spec.fit, spec.gravity) {
        case (.cover, .attention):
            let width = boxWidth!, height = boxHeight!
            let scale = max(Double(width) / Double(loaded.width), Double(height) / Double(loaded.height))
            let scaled = (width: Int((Double(loaded.width) * scale).rounded(.up)),
                          height: Int((Double(loaded.height) * scale).rounded(.up)))
            intermediate = scaled.width * scaled.height
            guard intermediate <= limits.maxOutputPixels else {
                throw .tooCostly("gravity=attention scales the whole \(area.width)×\(area.height) image to "
                    + "\(scaled.width)×\(scaled.height) before it crops; at most \(limits.maxOutputPixels) pixels")
            }
            box = (width, height)
            resize = .attention
            finish = .none
            made = (width, height)
            resized = made
        case (.cover, _):
            let width = boxWidth!, height = boxHeight!
            aspect = (width, height)
            box = (width, height)
            resize = .exact
            finish = .none
            made = (width, height)
            resized = made
        case (.contain, _), (.fill, _):
            let width = boxWidth!, height = boxHeight!
            box = (width, height)
            resize = .inside
            finish = spec.fit == .contain ? .pad : .stretch
            made = (width, height)
            let inside = Self.inside(kept, width, height, enlarge: true)
            resized = inside
            intermediate = inside.width * inside.height
        case (.inside, _):
            box = (boxWidth ?? Self.unbounded, boxHeight ?? Self.unbounded)
            resize = .down
            finish = .none
            made = Self.inside(kept, boxWidth ?? Self.unbounded, boxHeight ?? Self.unbounded, enlarge: false)
            resized = made
            // A source is measured against the thumbnail limit too: w alone never enlarges,
            // so it keeps a tall source's full height.
            guard made.width * made.height <= limits.maxOutputPixels else {
                throw .outputTooLarge(width: made.width, height: made.height, limit: limits.maxOutputPixels)
            }
        }
        coverAspect = aspect
        output = turns ? (made.height, made.width) : made
        crop = Self.cut(source: source, region: region, aspect: aspect, gravity: spec.gravity,
                        loaded: source.swapsSides
                            ? (decoded(source.height), decoded(source.width))
                            : (decoded(source.width), decoded(source.height)))
        intermediatePixels = intermediate
        if spec.format == .avif, output.width * output.height > limits.maxAVIFPixels {
            throw .tooCostly("an AVIF of \(output.width)×\(output.height) is more than \(limits.maxAVIFPixels) pixels; "
                + "ask for WebP or a smaller size")
        }
        let outputPixels = output.width * output.height
        try Self.checkFilters(spec, pixels: outputPixels * frames, limits: limits)
        let bytes = Self.bytesPerPixel
        let whole = decoded(source.width) * decoded(source.height)
        // libjpeg decoding at `eighths` writes the whole image before the resize reads it.
        let decode = source.source.decodesWhole || eighths != nil
            ? whole * bytes * (source.source == .heif ? 2 : 1) * frames
            : decoded(source.width) * bytes * min(decoded(source.height), Self.streamingRows)
        let encoder = switch spec.format {
        case .avif: 24
        case .webp: 8
        case .jpeg: spec.progressive ? 7 : 1  // a progressive JPEG holds every coefficient until the end
        case .png, .gif: 1
        }
        // The resized pixels in memory, the finished image, the encoder's own copy; a blur,
        // sharpen or turn holds one more finished image; an animation holds its finished
        // frames twice (each, then joined).
        let effects = (spec.blur != nil ? 1 : 0) + (spec.sharpen != nil ? 1 : 0) + (turns ? 1 : 0)
        let pipeline = (intermediate + (2 + effects) * outputPixels) * bytes + outputPixels * encoder
            + (frames > 1 ? 2 * frames * outputPixels * bytes : 0)
        estimatedBytes = Self.baseBytes + decode + pipeline + (resize == .attention ? intermediate * bytes : 0)
        guard estimatedBytes <= limits.maxMemoryBytes else {
            throw .tooCostly("this resize needs about \(estimatedBytes >> 20) MiB; one resize may use at most "
                + "\(limits.maxMemoryBytes >> 20) MiB")
        }
    }

    /// `crop` within an upright image of `size`: clamped to it; nil when it is all of it.
    static func region(_ crop: Region?, in size: (width: Int, height: Int)) throws(ThumbnailerError) -> Rect? {
        guard let crop else { return nil }
        let left = max(0, crop.left), top = max(0, crop.top)
        let right = min(size.width, crop.left + crop.width), bottom = min(size.height, crop.top + crop.height)
        guard right > left, bottom > top else {
            throw .cropOutside(crop, width: size.width, height: size.height)
        }
        let region = Rect(left: left, top: top, width: right - left, height: bottom - top)
        return region == Rect(left: 0, top: 0, width: size.width, height: size.height) ? nil : region
    }

    /// A blur or sharpen costs about its mask's width in multiplies per pixel, twice (libvips
    /// convolves rows, then columns): bounded by `filterTapsPerOutputPixel` times the
    /// largest thumbnail, so the largest sigma is allowed on a small thumbnail only.
    static func checkFilters(_ spec: ThumbnailSpec, pixels: Int, limits: Limits) throws(ThumbnailerError) {
        let budget = filterTapsPerOutputPixel * limits.maxOutputPixels
        for (name, sigma) in [("blur", spec.blur), ("sharpen", spec.sharpen)] {
            guard let sigma else { continue }
            let taps = 2 * Int((3 * sigma).rounded(.up)) + 1
            let work = 2 * taps * pixels
            guard work <= budget else {
                throw .tooCostly("\(name)=\(sigma) over \(pixels) pixels is about \(work / 1_000_000) million multiplies; "
                    + "at most \(budget / 1_000_000) million: ask for a smaller \(name) or a smaller size")
            }
        }
    }
}
