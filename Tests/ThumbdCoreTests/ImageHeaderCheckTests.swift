import Support
import Testing
import Thumbnailer
@testable import ThumbdCore

/// The Swift header check against libvips itself: it reads what libvips reads, and on
/// thousands of damaged copies of real images it never accepts one that libvips refuses.
@Suite("Image header check")
struct ImageHeaderCheckTests {
    static let thumbnailer = try! Thumbnailer()

    /// As the daemon asks: the sniffed format first (nil when it names none), then the header.
    static func check(_ bytes: [UInt8]) -> ImageHeaderCheck.Dimensions? {
        guard let type = ImageSniffer.contentType(of: Array(bytes.prefix(64))) else { return nil }
        return bytes.withUnsafeBytes { ImageHeaderCheck.dimensions(of: $0, contentType: type) }
    }

    /// libvips's dimensions of `bytes`, or nil when its header read refuses them.
    static func libvips(_ bytes: [UInt8]) -> ImageHeaderCheck.Dimensions? {
        guard let header = try? thumbnailer.header(of: Bytes(bytes)) else { return nil }
        return .init(width: header.width, height: header.height)
    }

    /// The simple WebP (one `VP8 ` or `VP8L` chunk) inside the extended file libvips writes.
    static func simpleWebP(from extended: [UInt8], chunk name: String) -> [UInt8] {
        let tag = Array(name.utf8)
        var position = 12
        while position + 8 <= extended.count {
            let size = Int(extended[position + 4]) | Int(extended[position + 5]) << 8
                | Int(extended[position + 6]) << 16 | Int(extended[position + 7]) << 24
            if Array(extended[position..<position + 4]) == tag {
                let chunk = Array(extended[position..<position + 8 + size]) + (size % 2 == 1 ? [0] : [])
                let riff = UInt32(4 + chunk.count)
                return Array("RIFF".utf8) + [UInt8(riff & 0xFF), UInt8(riff >> 8 & 0xFF), UInt8(riff >> 16 & 0xFF), UInt8(riff >> 24)]
                    + Array("WEBP".utf8) + chunk
            }
            position += 8 + size + size % 2
        }
        return extended
    }

    /// A 3×2 palette PNG (colour type 3, PLTE, pHYs) and a 3×2 lossless WebP (VP8L), as
    /// libvips 8.14 writes them (the WebP without its EXIF, so in the simple format).
    static let palettePNG: [UInt8] = [
        137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 3, 0, 0, 0, 2, 8, 3, 0, 0, 0, 170, 170,
        150, 40, 0, 0, 0, 3, 80, 76, 84, 69, 97, 97, 97, 168, 60, 151, 229, 0, 0, 0, 9, 112, 72, 89, 115, 0, 0, 3, 232,
        0, 0, 3, 232, 1, 181, 123, 82, 107, 0, 0, 0, 11, 73, 68, 65, 84, 8, 153, 99, 96, 128, 0, 0, 0, 8, 0, 1, 175, 83,
        234, 34, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
    ]
    static let losslessWebP: [UInt8] = [
        82, 73, 70, 70, 30, 0, 0, 0, 87, 69, 66, 80, 86, 80, 56, 76, 17, 0, 0, 0, 47, 2, 64, 0, 0, 7, 80, 133, 34, 215,
        163, 255, 129, 136, 232, 127, 0, 0,
    ]

    /// Real images of every shape the check reads: baseline JPEG with and without EXIF,
    /// RGB and RGBA PNG, palette PNG, lossy and lossless simple WebP.
    static func samples() throws -> [(String, [UInt8])] {
        let jpeg = try thumbnailer.testImage(width: 40, height: 30).array
        let rotated = try thumbnailer.testImage(width: 120, height: 80, orientation: 6).array  // with an EXIF APP1
        let png = try thumbnailer.testImage(width: 33, height: 17, format: .png).array
        let rgba = try thumbnailer.testImage(width: 20, height: 25, alpha: true, format: .png).array
        let webp = simpleWebP(from: try thumbnailer.testImage(width: 50, height: 40, format: .webp).array, chunk: "VP8 ")
        return [("jpeg", jpeg), ("jpeg+exif", rotated), ("png", png), ("png rgba", rgba), ("png palette", palettePNG),
                ("webp lossy", webp), ("webp lossless", losslessWebP)]
    }

    @Test("real JPEG, PNG and WebP: read here, with libvips's dimensions")
    func realImages() throws {
        for (name, bytes) in try Self.samples() {
            let here = Self.check(bytes)
            #expect(here != nil, "\(name) not read here")
            #expect(here == Self.libvips(bytes), "\(name)")
        }
        #expect(Self.check(Self.palettePNG) == .init(width: 3, height: 2))
        #expect(Self.check(Self.losslessWebP) == .init(width: 3, height: 2))
    }

    @Test("undecided, so left to libvips: garbage behind a signature, other formats, headers cut short")
    func undecided() throws {
        let garbage = [UInt8](repeating: 0x41, count: 400)
        for signature: [UInt8] in [[0xFF, 0xD8, 0xFF, 0xE0], [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A],
                                   Array("RIFF".utf8) + [0x98, 1, 0, 0] + Array("WEBPVP8 ".utf8)] {
            #expect(Self.check(signature + garbage) == nil)
        }
        #expect(Self.check([]) == nil)
        #expect(Self.check(Array("GIF89a".utf8) + garbage) == nil)  // a format read only by libvips
        #expect(Self.check(Array("<html>hi</html>".utf8)) == nil)
        let jpeg = try Self.thumbnailer.testImage(width: 40, height: 30).array
        #expect(Self.check(Array(jpeg.prefix(100))) == nil)  // cut before its scan
        var badCRC = Self.palettePNG
        badCRC[28] ^= 0x01  // IHDR's CRC no longer matches
        #expect(Self.check(badCRC) == nil)
        var sof3 = jpeg
        if let frame = (2..<sof3.count - 1).first(where: { sof3[$0] == 0xFF && sof3[$0 + 1] == 0xC0 }) {
            sof3[frame + 1] = 0xC3  // lossless JPEG: not libjpeg-turbo 2.1's to read
        }
        #expect(Self.check(sof3) == nil)
    }

    /// SplitMix64: the same damaged copies on every run.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
    }

    @Test("damaged copies: whatever is accepted here, libvips reads too, to the same size")
    func neverLooserThanLibvips() throws {
        var random = Random(state: 2026)
        var accepted = 0
        var undecided = 0
        for (name, image) in try Self.samples() {
            let reach = min(image.count, 800)  // where the headers are
            for round in 0..<600 {
                var damaged = image
                switch round % 4 {
                case 0:
                    damaged = Array(image.prefix(random.below(image.count)))
                case 1:
                    damaged[random.below(reach)] = UInt8(random.below(256))
                case 2:
                    let start = random.below(reach)
                    for index in start..<min(damaged.count, start + 1 + random.below(40)) {
                        damaged[index] = UInt8(random.below(256))
                    }
                default:
                    let index = random.below(reach)
                    damaged[index] ^= 1 << UInt8(random.below(8))
                }
                guard let here = Self.check(damaged) else {
                    undecided += 1
                    continue
                }
                accepted += 1
                #expect(Self.libvips(damaged) == here, "\(name), round \(round): accepted here, not so by libvips")
            }
        }
        // Both sides exercised: damage the check lets through (in pixel data, metadata) and
        // damage it leaves to libvips.
        #expect(accepted > 500 && undecided > 500, "accepted \(accepted), undecided \(undecided)")
    }
}
