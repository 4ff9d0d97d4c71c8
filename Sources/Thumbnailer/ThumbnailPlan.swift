/// What a thumbnail will cost, decided from the header before any pixel is decoded: the
/// decode shrink, the crop, every intermediate size, the output and an estimate of the
/// memory the whole pipeline holds at its peak. What cannot be bounded is refused here.
///
/// `cover` with the centre gravity crops *before* it resizes: the source is cut to the box's
/// aspect ratio first, so a 1×20000 image asked at 256×256 costs a 1×1 crop enlarged to
/// 256×256, not a 256×5,120,000 intermediate cropped afterwards (what libvips's own
/// thumbnail does). `attention` needs the whole image scaled first; its intermediate is
/// bounded by `maxOutputPixels`, and refused beyond.
public struct ThumbnailPlan: Sendable, Equatable {
    public struct Rect: Sendable, Equatable {
        public var left, top, width, height: Int
    }

    public enum Resize: Sendable, Equatable {
        /// Exactly the box (after a crop to its aspect ratio).
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
        public var maxSourcePixels: Int
        public var maxOutputPixels: Int
        /// One resize's estimated memory may not be more than this (the whole budget).
        public var maxMemoryBytes: Int
        /// AVIF's encoder is one call that cannot be stopped: its size is bounded instead.
        public var maxAVIFPixels: Int

        public init(maxSourcePixels: Int, maxOutputPixels: Int, maxMemoryBytes: Int, maxAVIFPixels: Int) {
            self.maxSourcePixels = maxSourcePixels
            self.maxOutputPixels = maxOutputPixels
            self.maxMemoryBytes = maxMemoryBytes
            self.maxAVIFPixels = maxAVIFPixels
        }
    }

    public let source: ImageHeader
    public let spec: ThumbnailSpec
    /// libjpeg's decode shrink (1, 2, 4 or 8).
    public let loadShrink: Int
    /// Cut from the loaded image, in its own (not yet rotated) frame, before the resize: the
    /// estimate from the header (the decoder's shrink may round the other way; the crop made
    /// is `centreCrop` of the image actually loaded, with `cropAspect`).
    public let crop: Rect?
    /// The aspect ratio the crop keeps, in the loaded image's frame.
    public let cropAspect: (width: Int, height: Int)?
    /// The box the resize is given, and how it meets it.
    public let box: (width: Int, height: Int)
    public let resize: Resize
    public let finish: Finish
    /// The size of the thumbnail.
    public let output: (width: Int, height: Int)
    /// The largest image the pipeline holds whole at once, in pixels.
    public let intermediatePixels: Int
    /// The memory the pipeline is expected to hold at its peak, in bytes.
    public let estimatedBytes: Int

    public static func == (lhs: ThumbnailPlan, rhs: ThumbnailPlan) -> Bool {
        lhs.source == rhs.source && lhs.spec == rhs.spec && lhs.loadShrink == rhs.loadShrink && lhs.crop == rhs.crop
            && lhs.cropAspect.map { [$0.width, $0.height] } == rhs.cropAspect.map { [$0.width, $0.height] }
            && lhs.box == rhs.box && lhs.resize == rhs.resize && lhs.finish == rhs.finish && lhs.output == rhs.output
            && lhs.intermediatePixels == rhs.intermediatePixels && lhs.estimatedBytes == rhs.estimatedBytes
    }

    /// Every band counted as 4 bytes (RGBA, 8 bits): the pipeline's images after decode.
    static let bytesPerPixel = 4
    /// Rows a decoder that streams (JPEG, PNG) holds while the resize reads them.
    static let streamingRows = 256
    /// What every resize holds whatever its size (libvips's objects, buffers, a thread).
    static let baseBytes = 2 << 20

    public init(source: ImageHeader, spec: ThumbnailSpec, limits: Limits) throws(ThumbnailerError) {
        guard source.pixels <= limits.maxSourcePixels else {
            throw .tooManyPixels(width: source.width, height: source.height, limit: limits.maxSourcePixels)
        }
        if let width = spec.width, let height = spec.height, width * height > limits.maxOutputPixels {
            throw .outputTooLarge(width: width, height: height, limit: limits.maxOutputPixels)
        }
        self.source = source
        self.spec = spec
        let shrink = source.source == .jpeg ? Self.jpegShrink(source, spec) : 1
        loadShrink = shrink
        // The loaded image, in its own frame, and upright.
        let loaded = (width: Self.divideUp(source.width, shrink), height: Self.divideUp(source.height, shrink))
        let upright = source.swapsSides ? (width: loaded.height, height: loaded.width) : loaded
        let oneSide = spec.width == nil || spec.height == nil
        var crop: Rect?
        var cropAspect: (width: Int, height: Int)?
        var intermediate = 0
        switch (oneSide ? Fit.inside : spec.fit, spec.gravity) {
        case (.cover, .center):
            let width = spec.width!, height = spec.height!
            // The box's aspect ratio in the loaded image's frame (turned when the image turns).
            let aspect = source.swapsSides ? (width: height, height: width) : (width: width, height: height)
            crop = Self.centreCrop(of: loaded, aspect: aspect)
            cropAspect = aspect
            box = (width, height)
            resize = .exact
            finish = .none
            output = (width, height)
        case (.cover, .attention):
            let width = spec.width!, height = spec.height!
            let scale = max(Double(width) / Double(upright.width), Double(height) / Double(upright.height))
            let scaled = (width: Int((Double(upright.width) * scale).rounded(.up)),
                          height: Int((Double(upright.height) * scale).rounded(.up)))
            intermediate = scaled.width * scaled.height
            guard intermediate <= limits.maxOutputPixels else {
                throw .tooCostly("gravity=attention scales the whole \(source.width)×\(source.height) image to "
                    + "\(scaled.width)×\(scaled.height) before it crops; at most \(limits.maxOutputPixels) pixels")
            }
            box = (width, height)
            resize = .attention
            finish = .none
            output = (width, height)
        case (.contain, _), (.fill, _):
            let width = spec.width!, height = spec.height!
            box = (width, height)
            resize = .inside
            finish = spec.fit == .contain ? .pad : .stretch
            output = (width, height)
            let inside = Self.inside(upright, width, height, enlarge: true)
            intermediate = inside.width * inside.height
        case (.inside, _):
            box = (spec.width ?? Self.unbounded, spec.height ?? Self.unbounded)
            resize = .down
            finish = .none
            output = Self.inside(upright, spec.width ?? Self.unbounded, spec.height ?? Self.unbounded, enlarge: false)
            // A source is measured against the thumbnail limit too: w alone never enlarges,
            // so it keeps a tall source's full height.
            guard output.width * output.height <= limits.maxOutputPixels else {
                throw .outputTooLarge(width: output.width, height: output.height, limit: limits.maxOutputPixels)
            }
        }
        self.crop = crop
        self.cropAspect = cropAspect
        intermediatePixels = intermediate
        if spec.format == .avif, output.width * output.height > limits.maxAVIFPixels {
            throw .tooCostly("an AVIF of \(output.width)×\(output.height) is more than \(limits.maxAVIFPixels) pixels; "
                + "ask for WebP or a smaller size")
        }
        let bytes = Self.bytesPerPixel
        let decode = source.source.decodesWhole
            ? loaded.width * loaded.height * bytes * (source.source == .heif ? 2 : 1)
            : loaded.width * bytes * min(loaded.height, Self.streamingRows)
        let outputPixels = output.width * output.height
        let encoder = switch spec.format {
        case .avif: 24
        case .webp: 8
        case .jpeg, .png: 1
        }
        // The resized pixels in memory, the finished image, the encoder's own copy.
        let pipeline = (intermediate + 2 * outputPixels) * bytes + outputPixels * encoder
        estimatedBytes = Self.baseBytes + decode + pipeline + (resize == .attention ? intermediate * bytes : 0)
        guard estimatedBytes <= limits.maxMemoryBytes else {
            throw .tooCostly("this resize needs about \(estimatedBytes >> 20) MiB; one resize may use at most "
                + "\(limits.maxMemoryBytes >> 20) MiB")
        }
    }

    /// The centred part of `image` with the ratio `aspect`; nil when that is the whole image.
    public static func centreCrop(of image: (width: Int, height: Int), aspect: (width: Int, height: Int)) -> Rect? {
        var cut = image
        if image.width * aspect.height > image.height * aspect.width {
            cut.width = max(1, Int((Double(image.height) * Double(aspect.width) / Double(aspect.height)).rounded()))
        } else {
            cut.height = max(1, Int((Double(image.width) * Double(aspect.height) / Double(aspect.width)).rounded()))
        }
        cut = (min(cut.width, image.width), min(cut.height, image.height))
        guard cut != image else { return nil }
        return Rect(left: (image.width - cut.width) / 2, top: (image.height - cut.height) / 2, width: cut.width, height: cut.height)
    }

    static let unbounded = 10_000_000  // libvips's largest coordinate (VIPS_MAX_COORD)

    static func divideUp(_ value: Int, _ divisor: Int) -> Int { (value + divisor - 1) / divisor }

    /// The size that fits `image` inside `width`×`height`, keeping its ratio.
    static func inside(_ image: (width: Int, height: Int), _ width: Int, _ height: Int, enlarge: Bool) -> (width: Int, height: Int) {
        var scale = min(Double(width) / Double(image.width), Double(height) / Double(image.height))
        if !enlarge { scale = min(scale, 1) }
        return (max(1, Int((Double(image.width) * scale).rounded())), max(1, Int((Double(image.height) * scale).rounded())))
    }

    /// The largest JPEG decode shrink (8, 4 or 2) that still leaves at least the pixels the
    /// thumbnail needs: libjpeg then decodes only those (imgproxy and PIL's draft mode do the
    /// same). 1 when the target is too close to the source to gain anything.
    static func jpegShrink(_ source: ImageHeader, _ spec: ThumbnailSpec) -> Int {
        let width = Double(source.swapsSides ? source.height : source.width)
        let height = Double(source.swapsSides ? source.width : source.height)
        let ratios = [spec.width.map { width / Double($0) }, spec.height.map { height / Double($0) }].compactMap { $0 }
        guard let smallest = ratios.min(), let largest = ratios.max() else { return 1 }
        // cover and fill need both sides at least as large as the box; the others only the
        // side that decides the fit.
        let both = spec.width != nil && spec.height != nil && (spec.fit == .cover || spec.fit == .fill)
        let factor = both ? smallest : largest
        for shrink in [8, 4, 2] where factor >= Double(shrink) { return shrink }
        return 1
    }
}
