import Support

/// The placeholder as a PNG of any asked size, for clients whose image decoder draws no SVG
/// (UIImage, Android's BitmapFactory, GdkPixbuf). It is a 1-bit palette image: a light fill
/// and a 1-pixel darker border. Its rows are written straight into deflate's code, never as
/// pixels: the top row as a run of one byte, each inside row as one copy of the row before
/// (a back-reference of one row), the bottom row as a run again. So the work and the memory
/// grow with the rows' length over 258 bytes (deflate's longest copy), not with the pixels:
/// about 100 bytes for a 256×256 tile, and at most about 90 KB for the largest (8192×8192,
/// `ThumbnailParameters.maxSide`), made in well under a millisecond.
enum PlaceholderPNG {
    static let fill: [UInt8] = [0xF2, 0xF2, 0xF2]
    static let border: [UInt8] = [0xCC, 0xCC, 0xCC]

    static func make(width: Int, height: Int) -> Bytes {
        precondition(width >= 1 && height >= 1)
        var png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        var header = bigEndian(UInt32(width)) + bigEndian(UInt32(height))
        header += [1, 3, 0, 0, 0]  // 1 bit, palette, deflate, no filter, no interlace
        chunk("IHDR", header, into: &png)
        chunk("PLTE", fill + border, into: &png)
        chunk("IDAT", zlib(width: width, height: height), into: &png)
        chunk("IEND", [], into: &png)
        return Bytes(png)
    }

    /// The raw rows (a filter byte, then 1 bit per pixel: 1 is the border) as a zlib stream.
    static func zlib(width: Int, height: Int) -> [UInt8] {
        let rowBytes = 1 + (width + 7) / 8
        let edge = [UInt8](repeating: 0, count: 1) + [UInt8](repeating: 0xFF, count: rowBytes - 1)
        var inside = [UInt8](repeating: 0, count: rowBytes)
        inside[1] |= 0x80
        inside[1 + (width - 1) / 8] |= 0x80 >> UInt8((width - 1) % 8)
        var out = BitWriter()
        out.write(1, bits: 1)  // the last block
        out.write(1, bits: 2)  // fixed Huffman codes
        var checksum = Adler32()
        func run(of row: [UInt8]) {  // a row whose bytes after the first two repeat the second
            out.literal(row[0])
            out.literal(row[1])
            out.copies(rowBytes - 2, distance: 1, else: row[1])
            checksum.add(row)
        }
        run(of: edge)
        if height > 1 {
            if height > 2 {
                for byte in inside { out.literal(byte) }
                checksum.add(inside)
                if height > 3 {
                    if (height - 3) * rowBytes >= 3 {
                        out.copies((height - 3) * rowBytes, distance: rowBytes, else: 0)
                    } else {
                        for _ in 0..<(height - 3) { for byte in inside { out.literal(byte) } }
                    }
                    checksum.add(inside, times: height - 3)
                }
            }
            run(of: edge)
        }
        out.symbol(256)
        return [0x78, 0x01] + out.finish() + bigEndian(checksum.value)
    }

    private static func chunk(_ type: String, _ data: [UInt8], into png: inout [UInt8]) {
        let typed = Array(type.utf8) + data
        png += bigEndian(UInt32(data.count)) + typed + bigEndian(CRC32.of(typed))
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)]
    }

    /// Deflate's bit order (least significant first), with its fixed codes (RFC 1951 §3.2.6).
    struct BitWriter {
        private var bytes: [UInt8] = []
        private var buffer: UInt64 = 0
        private var count = 0

        mutating func write(_ value: Int, bits: Int) {
            buffer |= UInt64(value) << UInt64(count)
            count += bits
            while count >= 8 {
                bytes.append(UInt8(buffer & 0xFF))
                buffer >>= 8
                count -= 8
            }
        }

        /// A Huffman code, written from its most significant bit.
        private mutating func code(_ value: Int, bits: Int) {
            var reversed = 0
            for bit in 0..<bits where value & (1 << bit) != 0 { reversed |= 1 << (bits - 1 - bit) }
            write(reversed, bits: bits)
        }

        mutating func symbol(_ symbol: Int) {
            switch symbol {
            case 0...143: code(0x30 + symbol, bits: 8)
            case 144...255: code(0x190 + symbol - 144, bits: 9)
            case 256...279: code(symbol - 256, bits: 7)
            default: code(0xC0 + symbol - 280, bits: 8)
            }
        }

        mutating func literal(_ byte: UInt8) { symbol(Int(byte)) }

        static let lengthBases = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
                                  163, 195, 227, 258]
        static let lengthExtra = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]
        static let distanceBases = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
                                    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577]
        static let distanceExtra = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
                                    13, 13]

        /// `length` bytes, each a copy of the one `distance` back: copies of at most 258, the
        /// last two sized so that none is shorter than 3 (deflate's shortest). Fewer than 3
        /// bytes in all are written as literals: `byte`, the value they repeat.
        mutating func copies(_ length: Int, distance: Int, else byte: UInt8) {
            guard length >= 3 else {
                for _ in 0..<length { literal(byte) }
                return
            }
            var left = length
            while left > 0 {
                let take = left > 258 ? (left - 258 < 3 ? left - 3 : 258) : left
                copy(take, distance: distance)
                left -= take
            }
        }

        private mutating func copy(_ length: Int, distance: Int) {
            let l = Self.lengthBases.lastIndex { $0 <= length }!
            symbol(257 + l)
            write(length - Self.lengthBases[l], bits: Self.lengthExtra[l])
            let d = Self.distanceBases.lastIndex { $0 <= distance }!
            code(d, bits: 5)
            write(distance - Self.distanceBases[d], bits: Self.distanceExtra[d])
        }

        mutating func finish() -> [UInt8] {
            if count > 0 { bytes.append(UInt8(buffer & 0xFF)) }
            return bytes
        }
    }

    /// zlib's checksum of the raw rows, a row (or a row repeated) at a time.
    struct Adler32 {
        private var a: UInt64 = 1
        private var b: UInt64 = 0
        private static let modulus: UInt64 = 65521

        /// `row` `times` times over, in time independent of `times`: one row adds its sum `s`
        /// to `a`, and `n·a + Σ(n − j)·byte_j` to `b`; `k` rows add `k·s` and
        /// `k·n·a + n·s·k(k−1)/2 + k·Σ(n − j)·byte_j`.
        mutating func add(_ row: [UInt8], times: Int = 1) {
            let m = Self.modulus
            let n = UInt64(row.count), k = UInt64(times)
            var sum: UInt64 = 0, weighted: UInt64 = 0
            for (j, byte) in row.enumerated() {
                sum += UInt64(byte)
                weighted += (n - UInt64(j)) * UInt64(byte)
            }
            sum %= m
            weighted %= m
            let pairs = (k * (k - 1) / 2) % m
            b = (b + (k % m) * ((n % m) * a % m) % m + (n % m) * sum % m * pairs % m + (k % m) * weighted % m) % m
            a = (a + (k % m) * sum) % m
        }

        var value: UInt32 { UInt32(b << 16 | a) }
    }
}

/// PNG's chunk checksum (ISO 3309, as zlib's crc32).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func of(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for byte in bytes { c = table[Int((c ^ UInt32(byte)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}
