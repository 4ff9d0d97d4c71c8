import Thumbnailer

/// One variant of an original: what is resized, stored and keyed.
struct Variant: Sendable, Equatable {
    enum Output: Sendable, Equatable {
        case fixed(ImageFormat)
        /// The source's own format (a still GIF and formats without an encoder here become
        /// PNG; an animated GIF kept animated stays GIF).
        case source
        /// Chosen from `Accept`: sent with `Vary: Accept`; JPEG becomes PNG for a source with alpha.
        case negotiated(ImageFormat)
    }

    var width: Int?
    var height: Int?
    var fit: Fit
    var gravity: Gravity
    var output: Output
    var quality: Int?
    var crop: Region? = nil
    var background: Color? = nil
    var blur: Double? = nil
    var sharpen: Double? = nil
    var rotate = 0
    var progressive = false

    var varyOnAccept: Bool {
        if case .negotiated = output { return true }
        return false
    }

    /// The cache key of this variant of `url`: every parameter, in one order, defaults
    /// spelled out, so equal variants share one object. The options after `q` are written
    /// only when asked, so the keys of variants without them stay what they were.
    func key(of url: String) -> String {
        let format = switch output {
        case .fixed(let format): format.rawValue
        case .source: "source"
        case .negotiated(let format): "auto-\(format.rawValue)"
        }
        var key = "\(url)#thumb:w=\(width.map(String.init) ?? "")&h=\(height.map(String.init) ?? "")"
            + "&fit=\(fit.rawValue)&gravity=\(Self.name(gravity))&format=\(format)&q=\(quality.map(String.init) ?? "")"
        if let crop { key += "&crop=\(crop.left),\(crop.top),\(crop.width),\(crop.height)" }
        if let background { key += "&bg=" + [background.red, background.green, background.blue].map { Self.hex($0) }.joined() }
        if let blur { key += "&blur=\(blur)" }
        if let sharpen { key += "&sharpen=\(sharpen)" }
        if rotate != 0 { key += "&rotate=\(rotate)" }
        if progressive { key += "&progressive=1" }
        return key
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16)
        return digits.count == 1 ? "0" + digits : digits
    }

    /// The gravity as the key spells it.
    static func name(_ gravity: Gravity) -> String {
        switch gravity {
        case .attention: "attention"
        case .focal(let x, let y): "focal:\(x),\(y)"
        default: Gravity.compass.first { $0.value == gravity }?.key ?? "center"
        }
    }

    /// The thumbnailer's spec, once the source's header is known. `animates`: the source is
    /// an animation the thumbnailer keeps animated (`Thumbnailer.Configuration.limits`).
    func spec(source: ImageHeader, avif: Bool, animates: Bool = false) -> ThumbnailSpec {
        let format: ImageFormat = switch output {
        case .fixed(let format): format == .avif && !avif ? .webp : format
        case .negotiated(let format): format == .jpeg && source.hasAlpha ? .png : format
        case .source: source.source == .gif && animates ? .gif : Self.sourceFormat(source.format, avif: avif)
        }
        return ThumbnailSpec(width: width, height: height, fit: fit, gravity: gravity, format: format,
                             quality: quality ?? Self.defaultQuality(format), crop: crop, background: background, blur: blur,
                             sharpen: sharpen, rotate: rotate, progressive: progressive)
    }

    static func defaultQuality(_ format: ImageFormat) -> Int {
        switch format {
        case .jpeg: 80
        case .webp: 80
        case .avif: 55
        case .png, .gif: 100
        }
    }

    private static func sourceFormat(_ format: ImageFormat?, avif: Bool) -> ImageFormat {
        switch format {
        case .avif?: avif ? .avif : .webp
        case let format?: format
        case nil: .png  // GIF, TIFF, SVG and the rest
        }
    }
}
