/// The fast path of the image check (415): the header structure of the formats most web
/// images come in, read in Swift, as imgproxy reads headers itself (its imagemeta package)
/// before a decoder sees the bytes.
///
/// It only ever *accepts*: a body whose header is clean by the letter of its format gets its
/// dimensions here; anything it does not know or finds the least bit odd is `nil`, and the
/// caller asks libvips as before (which also refuses). So the check is never looser than
/// libvips's header read (a test mutates real images and compares the two on every case) —
/// only much cheaper: libvips spends ~25 µs of CPU per body making and freeing its objects,
/// one body at a time, where this reads a few dozen bytes.
///
/// Every read is bounds-checked here (`at`), not by the buffer, whose subscript is not
/// checked in release builds: the bytes are an origin's, that is anyone's.
enum ImageHeaderCheck {
    struct Dimensions: Equatable, Sendable {
        var width: Int
        var height: Int
    }

    /// The dimensions of a body whose header reads cleanly, or nil (undecided: ask libvips).
    /// `contentType` is `ImageSniffer`'s for these bytes: the signature is already checked.
    static func dimensions(of bytes: UnsafeRawBufferPointer, contentType: String) -> Dimensions? {
        let body = Reader(bytes: bytes)
        switch contentType {
        case "image/jpeg": return jpeg(body)
        case "image/png": return png(body)
        case "image/webp": return webp(body)
        default: return nil
        }
    }

    /// Bounds-checked big- and little-endian reads.
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        var count: Int { bytes.count }

        func at(_ index: Int) -> UInt8? {
            index >= 0 && index < bytes.count ? bytes[index] : nil
        }
        func be16(_ index: Int) -> Int? {
            guard let a = at(index), let b = at(index + 1) else { return nil }
            return Int(a) << 8 | Int(b)
        }
        func be32(_ index: Int) -> Int? {
            guard let high = be16(index), let low = be16(index + 2) else { return nil }
            return high << 16 | low
        }
        func le16(_ index: Int) -> Int? {
            guard let a = at(index), let b = at(index + 1) else { return nil }
            return Int(b) << 8 | Int(a)
        }
        func le24(_ index: Int) -> Int? {
            guard let low = le16(index), let high = at(index + 2) else { return nil }
            return Int(high) << 16 | low
        }
        func le32(_ index: Int) -> Int? {
            guard let low = le16(index), let high = le16(index + 2) else { return nil }
            return high << 16 | low
        }
        func matches(_ expected: [UInt8], at offset: Int) -> Bool {
            guard offset >= 0, offset + expected.count <= bytes.count else { return false }
            for (index, byte) in expected.enumerated() where bytes[offset + index] != byte { return false }
            return true
        }
    }

    // MARK: JPEG

    /// What libjpeg's `jpeg_read_header` reads: SOI, then marker segments up to the first
    /// SOS. Accepted: 8-bit baseline, extended or progressive Huffman frames (SOF0–2) with
    /// 1, 3 or 4 components, sampling factors 1–4, sides 1–65500; DQT, DHT and DRI well
    /// formed; a scan whose components are the frame's. Anything else is libvips's to judge.
    static func jpeg(_ body: Reader) -> Dimensions? {
        var position = 2
        var frame: (Dimensions, [UInt8])?
        while true {
            guard body.at(position) == 0xFF else { return nil }
            while body.at(position) == 0xFF { position += 1 }  // fill bytes
            guard let marker = body.at(position), let length = body.be16(position + 1), length >= 2 else { return nil }
            let segment = position + 3  // the segment's payload, after its length
            let end = position + 1 + length
            guard end <= body.count else { return nil }
            switch marker {
            case 0xC0, 0xC1, 0xC2:
                guard frame == nil, let found = jpegFrame(body, segment, end) else { return nil }
                frame = found
            case 0xC4:
                guard jpegHuffmanTables(body, segment, end) else { return nil }
            case 0xDB:
                guard jpegQuantizationTables(body, segment, end) else { return nil }
            case 0xDD:
                guard length == 4 else { return nil }
            case 0xDA:
                guard let (dimensions, components) = frame, jpegScan(body, segment, end, frameComponents: components) else {
                    return nil
                }
                return dimensions
            case 0xE0...0xEF, 0xFE:
                break  // APPn and comments: skipped by libjpeg, read (leniently) by libvips
            default:
                return nil  // other frame types, arithmetic coding, DNL, EOI, RSTn, ...
            }
            position = end
        }
    }

    private static func jpegFrame(_ body: Reader, _ start: Int, _ end: Int) -> (Dimensions, [UInt8])? {
        guard body.at(start) == 8, let height = body.be16(start + 1), let width = body.be16(start + 3),
              let count = body.at(start + 5), count == 1 || count == 3 || count == 4, end - start == 6 + 3 * Int(count),
              (1...65500).contains(height), (1...65500).contains(width)
        else { return nil }
        var identifiers: [UInt8] = []
        for index in 0..<Int(count) {
            let component = start + 6 + 3 * index
            guard let identifier = body.at(component), let sampling = body.at(component + 1),
                  let table = body.at(component + 2),
                  (1...4).contains(sampling >> 4), (1...4).contains(sampling & 0x0F), table < 4,
                  !identifiers.contains(identifier)
            else { return nil }
            identifiers.append(identifier)
        }
        return (Dimensions(width: width, height: height), identifiers)
    }

    private static func jpegHuffmanTables(_ body: Reader, _ start: Int, _ end: Int) -> Bool {
        var position = start
        while position < end {
            guard let index = body.at(position), index & 0x0F < 4, index >> 4 <= 1 else { return false }
            var symbols = 0
            for offset in 1...16 {
                guard let count = body.at(position + offset) else { return false }
                symbols += Int(count)
            }
            guard symbols <= 256 else { return false }
            position += 17 + symbols
        }
        return position == end
    }

    private static func jpegQuantizationTables(_ body: Reader, _ start: Int, _ end: Int) -> Bool {
        var position = start
        while position < end {
            guard let index = body.at(position), index & 0x0F < 4, index >> 4 <= 1 else { return false }
            position += 1 + 64 * (index >> 4 == 0 ? 1 : 2)
        }
        return position == end
    }

    private static func jpegScan(_ body: Reader, _ start: Int, _ end: Int, frameComponents: [UInt8]) -> Bool {
        guard let count = body.at(start), (1...4).contains(count), end - start == 4 + 2 * Int(count) else { return false }
        var seen: [UInt8] = []
        for index in 0..<Int(count) {
            guard let identifier = body.at(start + 1 + 2 * index), frameComponents.contains(identifier),
                  !seen.contains(identifier)
            else { return false }
            seen.append(identifier)
        }
        return true
    }

    // MARK: PNG

    /// What libpng's `png_read_info` reads: the signature, IHDR first, then chunks up to the
    /// first IDAT, each before it with its CRC. Accepted: a valid IHDR (sides 1–1,000,000,
    /// libpng's default limit), one PLTE where a colour image may have one and a palette image
    /// must, ancillary chunks of up to 1 MB (libpng only warns about their contents), no other
    /// critical chunk.
    static func png(_ body: Reader) -> Dimensions? {
        var position = 8
        var dimensions: Dimensions?
        var colorType: UInt8 = 0
        var palette = false
        while true {
            guard let length = body.be32(position), let kind = body.be32(position + 4),
                  length <= (kind == Self.idat ? 8_000_000 : 1_000_000),  // libpng refuses past 8 MB
                  position + 12 + length <= body.count
            else { return nil }
            let type = position + 4
            let data = position + 8
            // libpng reads no further than the first IDAT's length and type: its data and CRC
            // are the decoder's business (and hashing them would cost what this saves).
            guard (0..<4).allSatisfy({ isLetter(body.at(type + $0)) }),
                  kind == Self.idat || body.be32(data + length) == Int(crc32(body, from: type, count: 4 + length))
            else { return nil }
            switch kind {
            case 0x4948_4452:  // IHDR
                guard dimensions == nil, position == 8, length == 13,
                      let width = body.be32(data), let height = body.be32(data + 4),
                      let depth = body.at(data + 8), let color = body.at(data + 9),
                      (1...1_000_000).contains(width), (1...1_000_000).contains(height),
                      validDepth(depth, for: color),
                      body.at(data + 10) == 0, body.at(data + 11) == 0, (body.at(data + 12) ?? 2) <= 1
                else { return nil }
                dimensions = Dimensions(width: width, height: height)
                colorType = color
            case 0x504C_5445:  // PLTE
                guard dimensions != nil, !palette, length > 0, length % 3 == 0, length <= 768,
                      colorType != 0, colorType != 4
                else { return nil }
                palette = true
            case Self.idat:
                guard let dimensions, colorType != 3 || palette else { return nil }
                return dimensions
            default:
                // Ancillary (lower-case first letter) and after IHDR; any other critical chunk
                // (IEND before the data, or one libpng does not know) is for libpng to judge.
                guard dimensions != nil, let first = body.at(type), first & 0x20 != 0 else { return nil }
            }
            position = data + length + 4
        }
    }

    private static let idat = 0x4944_4154

    private static func isLetter(_ byte: UInt8?) -> Bool {
        guard let byte else { return false }
        return (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
    }

    private static func validDepth(_ depth: UInt8, for color: UInt8) -> Bool {
        switch color {
        case 0: [1, 2, 4, 8, 16].contains(depth)
        case 3: [1, 2, 4, 8].contains(depth)
        case 2, 4, 6: [8, 16].contains(depth)
        default: false
        }
    }

    private static let crcTable: [UInt32] = (0..<256).map { index -> UInt32 in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        return crc
    }

    /// The CRC-32 of `count` bytes from `from` (bounds already checked by the caller).
    private static func crc32(_ body: Reader, from start: Int, count: Int) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        crcTable.withUnsafeBufferPointer { table in
            for index in start..<start + count {
                crc = table[Int((crc ^ UInt32(body.bytes[index])) & 0xFF)] ^ (crc >> 8)
            }
        }
        return ~crc
    }

    // MARK: WebP

    /// The simple formats only, as libwebp's demuxer reads them: a RIFF whose size is the
    /// file's, holding one `VP8 ` (lossy) or `VP8L` (lossless) chunk that fills it, with a
    /// valid frame header. The extended format (VP8X: alpha, animation, metadata) is
    /// libvips's to judge.
    private static let vp8 = Array("VP8 ".utf8)
    private static let vp8l = Array("VP8L".utf8)

    static func webp(_ body: Reader) -> Dimensions? {
        guard let riffSize = body.le32(4), riffSize % 2 == 0, riffSize + 8 == body.count,
              let chunkSize = body.le32(16), 20 + chunkSize + (chunkSize & 1) == body.count
        else { return nil }
        if body.matches(Self.vp8, at: 12) {
            // Frame tag (3 bytes: a key frame, version 0–3, shown), start code, 14-bit sides.
            guard chunkSize >= 10, let tag = body.at(20), tag & 1 == 0, (tag >> 1) & 7 <= 3, tag & 0x10 != 0,
                  let partition = body.le24(20), (partition >> 5) <= chunkSize - 10,
                  body.matches([0x9D, 0x01, 0x2A], at: 23),
                  let width = body.le16(26), let height = body.le16(28),
                  width & 0x3FFF > 0, height & 0x3FFF > 0
            else { return nil }
            return Dimensions(width: width & 0x3FFF, height: height & 0x3FFF)
        }
        if body.matches(Self.vp8l, at: 12) {
            // Signature 0x2F, then 14 bits of width - 1, 14 of height - 1, alpha, version 0.
            guard chunkSize >= 5, body.at(20) == 0x2F, let bits = body.le32(21), bits >> 29 == 0 else { return nil }
            return Dimensions(width: (bits & 0x3FFF) + 1, height: (bits >> 14 & 0x3FFF) + 1)
        }
        return nil
    }
}
