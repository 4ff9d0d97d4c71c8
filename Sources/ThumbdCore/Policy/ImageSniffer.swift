/// Tells an image from anything else by its first bytes, not by the origin's Content-Type
/// (which is often wrong, and which an attacker controls). The type we serve comes from here.
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
        if starts([0xFF, 0x0A]) || starts([0, 0, 0, 0x0C, 0x4A, 0x58, 0x4C, 0x20, 0x0D, 0x0A, 0x87, 0x0A]) {
            return "image/jxl"
        }
        if starts(ascii("II*\0")) || starts(ascii("MM\0*")) { return "image/tiff" }
        if starts(ascii("BM")) && bytes.count >= 26 { return "image/bmp" }
        if starts([0, 0, 1, 0]) && bytes.count >= 22 { return "image/x-icon" }
        return nil
    }
}
