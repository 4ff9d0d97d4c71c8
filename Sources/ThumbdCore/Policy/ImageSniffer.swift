/// Tells an image from anything else by its first bytes, not by the origin's Content-Type
/// (which is often wrong, and which an attacker controls). The type we serve comes from here;
/// each type named here has its decoder (`SourceFormat`), chosen by the same bytes.
public enum ImageSniffer {
    public static func contentType(of bytes: [UInt8]) -> String? {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            bytes.count >= offset + prefix.count && Array(bytes[offset..<offset + prefix.count]) == prefix
        }
        let ascii = { (text: String) in Array(text.utf8) }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(ascii("GIF87a")) || starts(ascii("GIF89a")) { return "image/gif" }
        if starts(ascii("RIFF")) && starts(ascii("WEBP"), at: 8) { return "image/webp" }
        if starts(ascii("ftyp"), at: 4) {
            for (brand, type) in [("avif", "image/avif"), ("avis", "image/avif"), ("heic", "image/heic"),
                                  ("heix", "image/heic"), ("mif1", "image/heif"), ("msf1", "image/heif")]
            where starts(ascii(brand), at: 8) {
                return type
            }
        }
        if starts(ascii("II*\0")) || starts(ascii("MM\0*")) { return "image/tiff" }
        // BMP, ICO and JPEG XL are refused (415): libvips 8.14 reads the first two only through
        // ImageMagick, which decodes the whole image to read its header, and JPEG XL only
        // through a loader it marks untrusted. SVG, PDF and the rest are never images here.
        return nil
    }
}
