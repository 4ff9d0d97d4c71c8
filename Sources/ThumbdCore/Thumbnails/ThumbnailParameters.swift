import Thumbnailer

/// `w`, `h`, `fit`, `gravity`, `format`, `q` of a `/thumb` request or a batch, parsed and
/// normalized: two requests that ask for the same pixels get the same variant key.
struct ThumbnailParameters: Sendable, Equatable {
    /// `format`: a concrete format, the source's own (`nil`: none asked), or the best the
    /// client's `Accept` takes (`auto`, resolved per request before the key is made).
    enum Format: Sendable, Equatable {
        case fixed(ImageFormat)
        case source
        case auto
    }

    var width: Int?
    var height: Int?
    var fit: Fit
    var gravity: Gravity
    var format: Format
    var quality: Int?

    static let names = ["w", "h", "fit", "gravity", "format", "q"]
    static let maxSide = 8192

    /// Nil when no thumbnail parameter is present (the original is served).
    init?(_ value: (String) -> String?) throws(ThumbdError) {
        guard Self.names.contains(where: { value($0) != nil }) else { return nil }
        func side(_ name: String) throws(ThumbdError) -> Int? {
            guard let text = value(name), !text.isEmpty else { return nil }
            guard let number = Int(text), (1...Self.maxSide).contains(number) else {
                throw .badRequest(.badParameter, "\(name) must be a whole number of pixels, 1 to \(Self.maxSide), not \(text)")
            }
            return number
        }
        width = try side("w")
        height = try side("h")
        switch value("fit") {
        case nil, "": fit = .cover
        case let text?:
            guard let parsed = Fit(rawValue: text) else {
                throw .badRequest(.badParameter, "fit must be cover, contain, fill or inside, not \(text)")
            }
            fit = parsed
        }
        switch value("gravity") {
        case nil, "", "centre": gravity = .center
        case let text?:
            guard let parsed = Gravity(rawValue: text) else {
                throw .badRequest(.badParameter, "gravity must be center or attention, not \(text)")
            }
            gravity = parsed
        }
        switch value("format") {
        case nil, "": format = .source
        case "auto": format = .auto
        case "jpg": format = .fixed(.jpeg)
        case let text?:
            guard let parsed = ImageFormat(rawValue: text) else {
                throw .badRequest(.badParameter, "format must be jpeg, png, webp, avif or auto, not \(text)")
            }
            format = .fixed(parsed)
        }
        if let text = value("q"), !text.isEmpty {
            guard let number = Int(text), (1...100).contains(number) else {
                throw .badRequest(.badParameter, "q must be 1 to 100, not \(text)")
            }
            quality = number
        } else {
            quality = nil
        }
    }

    /// The format `auto` picks for an `Accept` header (RFC 9110 §12.5.1): each format's
    /// q-value is that of its most specific range (`image/webp`, then `image/*`, then `*/*`),
    /// q=0 refuses it; the highest q wins, ties go to the first of `offered` (most preferred
    /// first: `thumbnails.autoFormats`, less AVIF where this libvips cannot encode it). When
    /// the client takes none of `offered`, another format thumbd makes that it lists (PNG,
    /// say) is answered; when it lists none, nil (406). No header takes everything. JPEG
    /// becomes PNG for a source with alpha, at resize time.
    static func negotiate(accept: String?, offered: [ImageFormat]) -> ImageFormat? {
        guard let accept, !accept.trimmingCharacters(in: .whitespaces).isEmpty else { return offered.first ?? .jpeg }
        var ranges: [String: Double] = [:]
        for part in accept.lowercased().split(separator: ",") {
            let fields = part.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let range = fields.first, !range.isEmpty else { continue }
            var q = 1.0
            for field in fields.dropFirst() {
                let pair = field.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard pair.count == 2, pair[0] == "q" else { continue }
                // qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ); anything else is read as 0.
                q = Self.qvalue(pair[1]) ?? 0
            }
            ranges[range] = max(ranges[range] ?? 0, q)
        }
        func q(_ format: ImageFormat) -> Double {
            ranges[format.mimeType] ?? ranges["image/*"] ?? ranges["*/*"] ?? 0
        }
        let others = [ImageFormat.png, .jpeg, .webp].filter { !offered.contains($0) }  // AVIF only when configured
        for candidates in [offered, others] {
            let best = candidates.map { ($0, q($0)) }.filter { $0.1 > 0 }
            if let top = best.map(\.1).max() { return best.first { $0.1 == top }?.0 }
        }
        return nil
    }

    private static func qvalue(_ text: String) -> Double? {
        let valid = text.wholeMatch(of: /0(\.[0-9]{0,3})?|1(\.0{0,3})?/) != nil
        return valid ? Double(text) : nil
    }

    /// This request's variant, with `auto` resolved: what the key and the resize use.
    func resolved(accept: String?, offered: [ImageFormat]) throws(ThumbdError) -> Variant {
        let chosen: Variant.Output
        switch format {
        case .fixed(let format): chosen = .fixed(format)
        case .source: chosen = .source
        case .auto:
            guard let format = Self.negotiate(accept: accept, offered: offered) else {
                throw ThumbdError(.notAcceptable, "format=auto: Accept (\(accept ?? "")) takes none of image/jpeg, image/png, "
                                      + "image/webp, image/avif")
            }
            chosen = .negotiated(format)
        }
        return Variant(width: width, height: height, fit: width != nil && height != nil ? fit : .inside,
                       gravity: fit == .cover && width != nil && height != nil ? gravity : .center,
                       output: chosen, quality: quality)
    }
}

/// One variant of an original: what is resized, stored and keyed.
struct Variant: Sendable, Equatable {
    enum Output: Sendable, Equatable {
        case fixed(ImageFormat)
        /// The source's own format (GIF and other formats without an encoder here become PNG).
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

    var varyOnAccept: Bool {
        if case .negotiated = output { return true }
        return false
    }

    /// The cache key of this variant of `url`: every parameter, in one order, defaults
    /// spelled out, so equal variants share one object.
    func key(of url: String) -> String {
        let format = switch output {
        case .fixed(let format): format.rawValue
        case .source: "source"
        case .negotiated(let format): "auto-\(format.rawValue)"
        }
        return "\(url)#thumb:w=\(width.map(String.init) ?? "")&h=\(height.map(String.init) ?? "")"
            + "&fit=\(fit.rawValue)&gravity=\(gravity.rawValue)&format=\(format)&q=\(quality.map(String.init) ?? "")"
    }

    /// The thumbnailer's spec, once the source's header is known.
    func spec(source: ImageHeader, avif: Bool) -> ThumbnailSpec {
        let format: ImageFormat = switch output {
        case .fixed(let format): format == .avif && !avif ? .webp : format
        case .negotiated(let format): format == .jpeg && source.hasAlpha ? .png : format
        case .source: Self.sourceFormat(source.format, avif: avif)
        }
        return ThumbnailSpec(width: width, height: height, fit: fit, gravity: gravity, format: format,
                             quality: quality ?? Self.defaultQuality(format))
    }

    static func defaultQuality(_ format: ImageFormat) -> Int {
        switch format {
        case .jpeg: 80
        case .webp: 80
        case .avif: 55
        case .png: 100
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
