import Foundation

/// Hand-made image bytes the tests need and libvips cannot draw.
package enum TestImages {
    /// A PNG whose IHDR claims `width`×`height`, with one tiny IDAT: enough for a header
    /// read, so a pixel bomb costs the test nothing to make.
    package static func pngHeaderOnly(width: UInt32, height: UInt32) -> [UInt8] {
        func be(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
        func chunk(_ kind: String, _ data: [UInt8]) -> [UInt8] {
            let body = Array(kind.utf8) + data
            return be(UInt32(data.count)) + body + be(crc32(body))
        }
        let ihdr = be(width) + be(height) + [8, 2, 0, 0, 0]
        let idat: [UInt8] = [0x78, 0x9C, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", ihdr) + chunk("IDAT", idat) + chunk("IEND", [])
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}

extension TestImages {
    /// A simple (lossy or lossless) WebP of `width`×`height` rewrapped as an extended WebP
    /// carrying an EXIF chunk of `exifBytes` bytes (a TIFF header, then filler): metadata far
    /// larger than the picture, which must not reach the encoder of the thumbnail.
    package static func webpWithEXIF(_ simple: [UInt8], width: Int, height: Int, exifBytes: Int) -> [UInt8] {
        func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        func le24(_ value: Int) -> [UInt8] { (0..<3).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        func chunk(_ kind: String, _ data: [UInt8]) -> [UInt8] {
            Array(kind.utf8) + le32(data.count) + data + (data.count % 2 == 1 ? [0] : [])
        }
        // The picture's own chunks (VP8, VP8L, ALPH), as they were; any VP8X, EXIF or XMP dropped.
        var image: [UInt8] = []
        var offset = 12
        while offset + 8 <= simple.count {
            let kind = String(decoding: simple[offset..<offset + 4], as: UTF8.self)
            let size = (0..<4).reduce(0) { $0 | Int(simple[offset + 4 + $1]) << (8 * $1) }
            let end = min(simple.count, offset + 8 + size + size % 2)
            if ["VP8 ", "VP8L", "ALPH"].contains(kind) { image += simple[offset..<end] }
            offset = end
        }
        let vp8x = chunk("VP8X", [0x08, 0, 0, 0] + le24(width - 1) + le24(height - 1))  // flags: EXIF
        let exif = chunk("EXIF", Array("II*\0".utf8) + [8, 0, 0, 0, 0, 0] + [UInt8](repeating: 0x45, count: max(0, exifBytes - 10)))
        let body = Array("WEBP".utf8) + vp8x + image + exif
        return Array("RIFF".utf8) + le32(body.count) + body
    }

    /// A BMP header (BITMAPINFOHEADER) claiming `width`×`height`, 24 bits, with no pixels.
    package static func bmpHeaderOnly(width: Int, height: Int) -> [UInt8] {
        func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        func le16(_ value: Int) -> [UInt8] { (0..<2).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        return Array("BM".utf8) + le32(54) + le32(0) + le32(54) + le32(40) + le32(width) + le32(height) + le16(1) + le16(24)
            + le32(0) + le32(0) + le32(2835) + le32(2835) + le32(0) + le32(0)
    }

    /// What libvips's own sniffing would hand to its SVG loader: `BM`, spaces, then an SVG.
    package static let bmThenSVG: [UInt8] = Array("BM".utf8) + [UInt8](repeating: 0x20, count: 64)
        + Array("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><rect width=\"10\" height=\"10\"/></svg>".utf8)

    /// The libraries mapped into this process whose path contains any of `names`.
    package static func mappedLibraries(matching names: [String]) -> [String] {
        // Read to the end: /proc files say they are empty, and a read by size stops at a page.
        guard let data = try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/maps")).readToEnd() else {
            return ["(no /proc/self/maps)"]
        }
        let maps = String(decoding: data, as: UTF8.self)
        let paths = maps.split(separator: "\n").compactMap { line in line.split(separator: " ", omittingEmptySubsequences: true).last }
        return Set(paths.map(String.init).filter { path in names.contains { path.localizedCaseInsensitiveContains($0) } }).sorted()
    }
}
