internal import CVips
import Support

/// The formats thumbd decodes, each by its own libvips loader called by name. Nothing
/// else reaches a decoder: BMP, ICO, JPEG XL, SVG, PDF and the rest are refused before
/// any loader runs (libvips's own sniffing, which would pick them, is never used).
public enum SourceFormat: String, Sendable, CaseIterable {
    case jpeg, png, gif, webp, heif, tiff

    /// The format named by the first bytes, or nil for anything thumbd does not decode.
    /// `ftyp` boxes are HEIF only with an image brand (AVIF, HEIC, MIF1).
    public static func sniff(_ bytes: UnsafeRawBufferPointer) -> SourceFormat? {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            guard bytes.count >= offset + prefix.count else { return false }
            for (index, byte) in prefix.enumerated() where bytes[offset + index] != byte { return false }
            return true
        }
        if starts([0xFF, 0xD8, 0xFF]) { return .jpeg }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return .gif }
        if starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8) { return .webp }
        if starts(Array("ftyp".utf8), at: 4) {
            for brand in ["avif", "avis", "heic", "heix", "mif1", "msf1"] where starts(Array(brand.utf8), at: 8) {
                return .heif
            }
        }
        if starts(Array("II*\0".utf8)) || starts(Array("MM\0*".utf8)) { return .tiff }
        return nil
    }

    public static func sniff(_ body: Bytes) -> SourceFormat? {
        body.withUnsafeBytes { sniff($0) }
    }

    /// Decoders that hold the whole decoded image in memory (no row-by-row decode).
    var decodesWhole: Bool {
        switch self {
        case .jpeg, .png: false
        case .gif, .webp, .heif, .tiff: true
        }
    }

    var code: Int32 {
        switch self {
        case .jpeg: Int32(THUMBD_LOAD_JPEG)
        case .png: Int32(THUMBD_LOAD_PNG)
        case .gif: Int32(THUMBD_LOAD_GIF)
        case .webp: Int32(THUMBD_LOAD_WEBP)
        case .heif: Int32(THUMBD_LOAD_HEIF)
        case .tiff: Int32(THUMBD_LOAD_TIFF)
        }
    }
}

/// What an image is, from its header alone (no pixel decoded).
public struct ImageHeader: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var hasAlpha: Bool
    /// Frames of an animation (1 for a still image).
    public var pages: Int
    /// EXIF orientation (1–8; 5–8 swap width and height once applied).
    public var orientation: Int = 1
    /// Bands as decoded (1 grey, 3 colour, 4 CMYK or colour with alpha).
    public var bands: Int = 3
    /// The format, and so the loader that read it.
    public var source: SourceFormat

    public init(width: Int, height: Int, hasAlpha: Bool, pages: Int, orientation: Int = 1, bands: Int = 3,
                source: SourceFormat) {
        self.width = width
        self.height = height
        self.hasAlpha = hasAlpha
        self.pages = pages
        self.orientation = orientation
        self.bands = bands
        self.source = source
    }

    /// The source's format, when thumbd can encode it.
    public var format: ImageFormat? {
        switch source {
        case .jpeg: .jpeg
        case .png: .png
        case .webp: .webp
        case .heif: .avif
        case .gif, .tiff: nil
        }
    }

    public var pixels: Int { width * height }

    /// Whether the image is upright only once turned a quarter (EXIF 5–8).
    var swapsSides: Bool { (5...8).contains(orientation) }
}

/// What thumbd encodes. GIF is written only for an animated GIF kept animated.
public enum ImageFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp, avif, gif

    public var mimeType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .png: "image/png"
        case .webp: "image/webp"
        case .avif: "image/avif"
        case .gif: "image/gif"
        }
    }

    public var hasAlpha: Bool { self != .jpeg }

    /// Whether it can hold an animation.
    public var canAnimate: Bool { self == .webp || self == .gif }

    var code: Int32 {
        switch self {
        case .jpeg: Int32(THUMBD_JPEG)
        case .png: Int32(THUMBD_PNG)
        case .webp: Int32(THUMBD_WEBP)
        case .avif: Int32(THUMBD_AVIF)
        case .gif: Int32(THUMBD_GIF)
        }
    }
}

/// How the image meets the box.
public enum Fit: String, Sendable, CaseIterable {
    /// Fill the box, crop the overflow.
    case cover
    /// Fit inside the box, pad the rest (transparent where the format allows, else white).
    case contain
    /// Stretch to the box.
    case fill
    /// Fit inside the box, never enlarged.
    case inside
}

/// Which part `cover` keeps, in the upright source (EXIF orientation applied, before `rotate`).
public enum Gravity: Sendable, Equatable {
    case center
    case north, south, east, west, northEast, northWest, southEast, southWest
    /// libvips's smart crop.
    case attention
    /// The kept part is centred on this point (0–1 of the source's width and height), as
    /// near as the edges allow.
    case focal(x: Double, y: Double)

    /// The compass points by the names the query uses.
    public static let compass: [String: Gravity] = [
        "center": .center, "n": .north, "s": .south, "e": .east, "w": .west,
        "ne": .northEast, "nw": .northWest, "se": .southEast, "sw": .southWest,
    ]

    /// Where the kept part sits, as a fraction of the room left on each axis (0: the left or
    /// top edge, 1: the right or bottom): nil for `attention` and `focal`.
    var edge: (x: Double, y: Double)? {
        switch self {
        case .center: (0.5, 0.5)
        case .north: (0.5, 0)
        case .south: (0.5, 1)
        case .east: (1, 0.5)
        case .west: (0, 0.5)
        case .northEast: (1, 0)
        case .northWest: (0, 0)
        case .southEast: (1, 1)
        case .southWest: (0, 1)
        case .attention, .focal: nil
        }
    }
}

/// A rectangle of pixels.
public struct Region: Sendable, Equatable {
    public var left, top, width, height: Int

    public init(left: Int, top: Int, width: Int, height: Int) {
        self.left = left
        self.top = top
        self.width = width
        self.height = height
    }
}

/// An opaque sRGB colour.
public struct Color: Sendable, Equatable {
    public var red, green, blue: UInt8

    public init(red: UInt8, green: UInt8, blue: UInt8) {
        self.red = red
        self.green = green
        self.blue = blue
    }

    public static let white = Color(red: 255, green: 255, blue: 255)
}

/// One thumbnail's parameters, in the thumbnailer's terms.
public struct ThumbnailSpec: Sendable, Equatable {
    public var width: Int?
    public var height: Int?
    public var fit: Fit
    public var gravity: Gravity
    public var format: ImageFormat
    public var quality: Int
    /// A rectangle of the upright source, in its pixels, cut before anything else.
    public var crop: Region?
    /// The padding of `contain`, and what JPEG flattens alpha on. Nil: the padding is
    /// transparent where the format has alpha, else white.
    public var background: Color?
    /// Gaussian blur and sharpening sigmas, applied to the resized pixels.
    public var blur: Double?
    public var sharpen: Double?
    /// A clockwise quarter turn (0, 90, 180, 270) after the EXIF orientation. `width` and
    /// `height` are the output's, after the turn.
    public var rotate: Int
    /// A progressive JPEG, an interlaced PNG.
    public var progressive: Bool
    /// An animation stays animated when `format` can animate (false: its first frame).
    public var animated = true

    public init(width: Int?, height: Int?, fit: Fit = .cover, gravity: Gravity = .center, format: ImageFormat, quality: Int,
                crop: Region? = nil, background: Color? = nil, blur: Double? = nil, sharpen: Double? = nil, rotate: Int = 0,
                progressive: Bool = false) {
        self.width = width
        self.height = height
        self.fit = fit
        self.gravity = gravity
        self.format = format
        self.quality = quality
        self.crop = crop
        self.background = background
        self.blur = blur
        self.sharpen = sharpen
        self.rotate = rotate
        self.progressive = progressive
    }
}

/// An encoded thumbnail.
public struct Thumbnail: Sendable {
    public var body: Bytes
    public var format: ImageFormat
    public var width: Int
    public var height: Int
    /// Frames of an animation (1 for a still image).
    public var frames: Int = 1
}
