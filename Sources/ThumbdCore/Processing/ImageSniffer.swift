import Thumbnailer

/// Tells an image from anything else by its first bytes, not by the origin's Content-Type
/// (which is often wrong, and which an attacker controls). The type we serve comes from here,
/// and only for the formats thumbd decodes: the signatures are `SourceFormat`'s, the same
/// bytes that choose the decoder. BMP, ICO and JPEG XL are refused (415): libvips 8.14 reads
/// the first two only through ImageMagick, which decodes the whole image to read its header,
/// and JPEG XL only through a loader it marks untrusted. SVG, PDF and the rest are never
/// images here.
package enum ImageSniffer {
    package static func contentType(of bytes: [UInt8]) -> String? {
        sniff(bytes)?.contentType
    }

    /// The decoder the first bytes choose, and the type served: one reading of the signature.
    package static func sniff(_ bytes: [UInt8]) -> (format: SourceFormat, contentType: String)? {
        guard let format = bytes.withUnsafeBytes({ SourceFormat.sniff($0) }) else { return nil }
        let type = switch format {
        case .jpeg: "image/jpeg"
        case .png: "image/png"
        case .gif: "image/gif"
        case .webp: "image/webp"
        case .tiff: "image/tiff"
        case .heif: heifType(brand: bytes.count >= 12 ? String(decoding: bytes[8..<12], as: UTF8.self) : "")
        }
        return (format, type)
    }

    /// The `ftyp` box's major brand names the HEIF family member.
    private static func heifType(brand: String) -> String {
        switch brand {
        case "avif", "avis": "image/avif"
        case "heic", "heix": "image/heic"
        default: "image/heif"
        }
    }
}
