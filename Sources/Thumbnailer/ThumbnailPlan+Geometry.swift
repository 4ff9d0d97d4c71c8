/// The plan's rectangles: the cut in the upright source, placed by the gravity, and mapped
/// into the decoder's own frame; the sizes a fit gives; libjpeg's shrink.
extension ThumbnailPlan {
    /// The cut of an image loaded at `loaded` (its own frame, not yet turned by its EXIF
    /// orientation): the region, then the part `cover` keeps; nil when that is all of it.
    public func cut(loaded: (width: Int, height: Int)) -> Rect? {
        Self.cut(source: source, region: region, aspect: coverAspect, gravity: spec.gravity, loaded: loaded)
    }

    static func cut(source: ImageHeader, region: Rect?, aspect: (width: Int, height: Int)?, gravity: Gravity,
                    loaded: (width: Int, height: Int)) -> Rect? {
        let upright = source.swapsSides ? (width: loaded.height, height: loaded.width) : loaded
        let whole = Rect(left: 0, top: 0, width: upright.width, height: upright.height)
        let full = source.upright
        let scale = (x: Double(upright.width) / Double(full.width), y: Double(upright.height) / Double(full.height))
        var rect = whole
        if let region {
            // The region in the loaded image's pixels (the decoder may have shrunk it).
            let left = min(upright.width - 1, Int((Double(region.left) * scale.x).rounded(.down)))
            let top = min(upright.height - 1, Int((Double(region.top) * scale.y).rounded(.down)))
            let right = min(upright.width, max(left + 1, Int((Double(region.left + region.width) * scale.x).rounded(.up))))
            let bottom = min(upright.height, max(top + 1, Int((Double(region.top + region.height) * scale.y).rounded(.up))))
            rect = Rect(left: left, top: top, width: right - left, height: bottom - top)
        }
        if let aspect {
            let size = Self.cutSize(of: (rect.width, rect.height), aspect: aspect)
            let room = (x: rect.width - size.width, y: rect.height - size.height)
            var offset: (x: Int, y: Int)
            switch gravity {
            case .focal(let x, let y):
                // Centred on the point (a fraction of the whole source), as near as the edges allow.
                let centre = (x: x * Double(upright.width) - Double(rect.left), y: y * Double(upright.height) - Double(rect.top))
                offset = (Int((centre.x - Double(size.width) / 2).rounded()), Int((centre.y - Double(size.height) / 2).rounded()))
            default:
                let edge = gravity.edge ?? (0.5, 0.5)
                offset = (Int(Double(room.x) * edge.x), Int(Double(room.y) * edge.y))
            }
            offset = (min(max(0, offset.x), room.x), min(max(0, offset.y), room.y))
            rect = Rect(left: rect.left + offset.x, top: rect.top + offset.y, width: size.width, height: size.height)
        }
        guard rect != whole else { return nil }
        return stored(rect, upright: upright, orientation: source.orientation)
    }

    /// The largest size with the ratio `aspect` inside `image` (at least 1×1).
    static func cutSize(of image: (width: Int, height: Int), aspect: (width: Int, height: Int)) -> (width: Int, height: Int) {
        var cut = image
        if image.width * aspect.height > image.height * aspect.width {
            cut.width = max(1, Int((Double(image.height) * Double(aspect.width) / Double(aspect.height)).rounded()))
        } else {
            cut.height = max(1, Int((Double(image.width) * Double(aspect.height) / Double(aspect.width)).rounded()))
        }
        return (min(cut.width, image.width), min(cut.height, image.height))
    }

    /// The centred part of `image` with the ratio `aspect`; nil when that is the whole image.
    public static func centreCrop(of image: (width: Int, height: Int), aspect: (width: Int, height: Int)) -> Rect? {
        let cut = cutSize(of: image, aspect: aspect)
        guard cut != image else { return nil }
        return Rect(left: (image.width - cut.width) / 2, top: (image.height - cut.height) / 2, width: cut.width, height: cut.height)
    }

    /// `rect` of an upright image of size `upright`, in the frame its pixels are stored in
    /// before the EXIF `orientation` (1–8) turns or mirrors them upright.
    static func stored(_ rect: Rect, upright: (width: Int, height: Int), orientation: Int) -> Rect {
        let (w, h) = (upright.width, upright.height)
        let right = w - rect.left - rect.width, bottom = h - rect.top - rect.height
        switch orientation {
        case 2: return Rect(left: right, top: rect.top, width: rect.width, height: rect.height)
        case 3: return Rect(left: right, top: bottom, width: rect.width, height: rect.height)
        case 4: return Rect(left: rect.left, top: bottom, width: rect.width, height: rect.height)
        case 5: return Rect(left: rect.top, top: rect.left, width: rect.height, height: rect.width)
        case 6: return Rect(left: rect.top, top: right, width: rect.height, height: rect.width)
        case 7: return Rect(left: bottom, top: right, width: rect.height, height: rect.width)
        case 8: return Rect(left: bottom, top: rect.left, width: rect.height, height: rect.width)
        default: return rect
        }
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
        jpegShrink(area: source.upright, width: spec.width, height: spec.height, fit: spec.fit)
    }

    /// The shrink for an upright `area` of the source (all of it, or the asked crop) and the box.
    static func jpegShrink(area: (width: Int, height: Int), width boxWidth: Int?, height boxHeight: Int?, fit: Fit) -> Int {
        guard let factor = jpegFactor(area: area, width: boxWidth, height: boxHeight, fit: fit) else { return 1 }
        for shrink in [8, 4, 2] where factor >= Double(shrink) { return shrink }
        return 1
    }

    /// libjpeg's smallest scale, in eighths, that keeps the decoded `area` at least as large
    /// as the box asks (1–7: at 1, 2 and 4 the loader's `jpegShrink` is the same scale); nil
    /// at the whole size, which the loader decodes.
    static func jpegEighths(area: (width: Int, height: Int), width boxWidth: Int?, height boxHeight: Int?,
                            fit: Fit) -> Int? {
        guard let factor = jpegFactor(area: area, width: boxWidth, height: boxHeight, fit: fit) else { return nil }
        let eighths = min(8, max(1, Int((8 / factor - 1e-9).rounded(.up))))
        return eighths == 8 ? nil : eighths
    }

    /// How many times larger the `area` is than the box, on the side that must stay at least
    /// as large as the box: nil with no box.
    static func jpegFactor(area: (width: Int, height: Int), width boxWidth: Int?, height boxHeight: Int?,
                           fit: Fit) -> Double? {
        let ratios = [boxWidth.map { Double(area.width) / Double($0) }, boxHeight.map { Double(area.height) / Double($0) }]
            .compactMap { $0 }
        guard let smallest = ratios.min(), let largest = ratios.max() else { return nil }
        // cover and fill need both sides at least as large as the box; the others only the
        // side that decides the fit.
        let both = boxWidth != nil && boxHeight != nil && (fit == .cover || fit == .fill)
        return both ? smallest : largest
    }
}

extension ImageHeader {
    /// The size once the EXIF orientation is applied.
    var upright: (width: Int, height: Int) { swapsSides ? (height, width) : (width, height) }
}
