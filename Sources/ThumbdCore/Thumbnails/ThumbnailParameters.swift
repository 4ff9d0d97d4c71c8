import Foundation
import Thumbnailer

/// The thumbnail parameters of a `/thumb` request or a batch (`w`, `h`, `dpr`, `fit`,
/// `gravity`, `fx`, `fy`, `crop`, `bg`, `blur`, `sharpen`, `rotate`, `format`, `q`,
/// `progressive`, `preset`), parsed and normalized: two requests that ask for the same pixels
/// get the same variant key (`w=200&dpr=2` is `w=400`).
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
    var crop: Region?
    var background: Color?
    var blur: Double?
    var sharpen: Double?
    var rotate: Int
    var progressive: Bool

    static let names = ["w", "h", "dpr", "fit", "gravity", "fx", "fy", "crop", "bg", "blur", "sharpen", "rotate", "format",
                        "q", "progressive", "preset"]
    static let maxSide = 8192
    /// libvips's largest coordinate: a crop's numbers are bounded by it before any header is read.
    static let maxCoordinate = 10_000_000

    /// A side as asked (`w`, `h`), 1 to `maxSide`, times `dpr` (1 to 4): nil when the text is
    /// not such a number. The range is read before the product, which then stays far inside
    /// `Int` (a side near `Int.max` times a `dpr` would trap converting back).
    static func side(_ text: String, dpr: Double) -> Int? {
        guard let number = Int(text), (1...maxSide).contains(number) else { return nil }
        return Int((Double(number) * dpr).rounded())
    }

    /// Nil when no thumbnail parameter is present, from the request or its preset (the
    /// original is served). The request's own values win over its preset's.
    init?(_ request: (String) -> String?, presets: Presets = Presets()) throws(ThumbdError) {
        let named = try presets.resolve(request)
        func value(_ name: String) -> String? {
            if let text = request(name), !text.isEmpty { return text }
            return named[name]
        }
        guard Self.names.contains(where: { value($0) != nil }) else { return nil }
        let dpr = try Self.number(value("dpr"), "dpr", in: 1...4) ?? 1
        func side(_ name: String) throws(ThumbdError) -> Int? {
            guard let text = value(name) else { return nil }
            guard let scaled = Self.side(text, dpr: dpr) else {
                throw .badRequest(.badParameter, "\(name) must be a whole number of pixels, 1 to \(Self.maxSide), not \(text)")
            }
            guard scaled <= Self.maxSide else {
                throw .badRequest(.badParameter, "\(name) × dpr must be at most \(Self.maxSide) pixels, not \(scaled)")
            }
            return scaled
        }
        width = try side("w")
        height = try side("h")
        switch value("fit") {
        case nil: fit = .cover
        case let text?:
            guard let parsed = Fit(rawValue: text) else {
                throw .badRequest(.badParameter, "fit must be cover, contain, fill or inside, not \(text)")
            }
            fit = parsed
        }
        gravity = try Self.gravity(value)
        switch value("format") {
        case nil: format = .source
        case "auto": format = .auto
        case "jpg": format = .fixed(.jpeg)
        case let text?:
            guard let parsed = ImageFormat(rawValue: text), parsed != .gif else {
                throw .badRequest(.badParameter, "format must be jpeg, png, webp, avif or auto, not \(text)")
            }
            format = .fixed(parsed)
        }
        if let text = value("q") {
            guard let number = Int(text), (1...100).contains(number) else {
                throw .badRequest(.badParameter, "q must be a whole number, 1 to 100, not \(text)")
            }
            quality = number
        } else {
            quality = nil
        }
        crop = try Self.crop(value("crop"))
        background = try Self.color(value("bg"))
        blur = try Self.number(value("blur"), "blur", in: ThumbnailPlan.sigmas)
        sharpen = try Self.number(value("sharpen"), "sharpen", in: ThumbnailPlan.sigmas)
        switch value("rotate") {
        case nil, "0": rotate = 0
        case "90": rotate = 90
        case "180": rotate = 180
        case "270": rotate = 270
        case let text?: throw .badRequest(.badParameter, "rotate must be 90, 180 or 270, not \(text)")
        }
        switch value("progressive") {
        case nil, "0", "false": progressive = false
        case "1", "true": progressive = true
        case let text?: throw .badRequest(.badParameter, "progressive must be 1 or 0, not \(text)")
        }
    }

    /// `gravity`, with `fx` and `fy` for `focal` (and only then).
    private static func gravity(_ value: (String) -> String?) throws(ThumbdError) -> Gravity {
        let fx = try number(value("fx"), "fx", in: 0...1), fy = try number(value("fy"), "fy", in: 0...1)
        switch value("gravity") {
        case "focal":
            guard let fx, let fy else {
                throw .badRequest(.badParameter, "gravity=focal needs fx and fy, each 0 to 1 (a fraction of the source)")
            }
            return .focal(x: fx, y: fy)
        case let text:
            if fx != nil || fy != nil {
                throw .badRequest(.badParameter, "fx and fy place gravity=focal; give gravity=focal with them")
            }
            guard let text else { return .center }
            if text == "centre" { return .center }
            if text == "attention" { return .attention }
            guard let compass = Gravity.compass[text] else {
                throw .badRequest(.badParameter, "gravity must be center, n, s, e, w, ne, nw, se, sw, attention or focal, not \(text)")
            }
            return compass
        }
    }

    /// A decimal number within `range`, or nil when absent.
    private static func number(_ text: String?, _ name: String, in range: ClosedRange<Double>) throws(ThumbdError) -> Double? {
        guard let text else { return nil }
        guard let number = Double(text), number.isFinite, range.contains(number) else {
            throw .badRequest(.badParameter, "\(name) must be a number from \(range.lowerBound.formatted()) to "
                                  + "\(range.upperBound.formatted()), not \(text)")
        }
        return number
    }

    /// `crop=x,y,w,h`: whole numbers of source pixels, `w` and `h` at least 1.
    private static func crop(_ text: String?) throws(ThumbdError) -> Region? {
        guard let text else { return nil }
        let numbers = text.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
        guard numbers.count == 4, let x = numbers[0], let y = numbers[1], let w = numbers[2], let h = numbers[3],
              (0..<maxCoordinate).contains(x), (0..<maxCoordinate).contains(y), (1...maxCoordinate).contains(w),
              (1...maxCoordinate).contains(h)
        else {
            throw .badRequest(.badParameter, "crop must be x,y,w,h in source pixels (x and y from 0, w and h from 1, "
                                  + "each at most \(maxCoordinate)), not \(text)")
        }
        return Region(left: x, top: y, width: w, height: h)
    }

    /// `bg=RRGGBB` (six hex digits, `#` allowed before them).
    private static func color(_ text: String?) throws(ThumbdError) -> Color? {
        guard let text else { return nil }
        let hex = text.hasPrefix("#") ? String(text.dropFirst()) : text
        guard hex.utf8.count == 6, hex.allSatisfy(\.isHexDigit), let value = UInt32(hex, radix: 16) else {
            throw .badRequest(.badParameter, "bg must be a colour as six hex digits, RRGGBB, not \(text)")
        }
        return Color(red: UInt8(value >> 16), green: UInt8((value >> 8) & 0xFF), blue: UInt8(value & 0xFF))
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
                       output: chosen, quality: quality, crop: crop, background: background, blur: blur, sharpen: sharpen,
                       rotate: rotate, progressive: progressive)
    }
}
