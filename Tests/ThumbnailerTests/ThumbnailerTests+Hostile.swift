import Dispatch
import Foundation
import Support
import TestThreads
import Testing
import ThumbdTesting
@testable import Thumbnailer

/// Images that attack the decoder: pixel bombs, garbage, formats thumbd never decodes, a
/// needle, a huge EXIF chunk, and failures named by their step.
extension ThumbnailerTests {
    @Test("a pixel bomb is refused from its header, without decoding")
    func pixelBomb() throws {
        let bomb = Bytes(TestImages.pngHeaderOnly(width: 30_000, height: 30_000))
        // The file holds a header and no pixels: only a refusal read from the header names
        // the 900 megapixels (a decode would fail on the missing data instead).
        #expect(throws: ThumbnailerError.tooManyPixels(width: 30_000, height: 30_000, limit: 50_000_000)) {
            try Self.thumbnailer.thumbnail(of: bomb, ThumbnailSpec(width: 64, height: 64, format: .jpeg, quality: 80))
        }
    }

    @Test("not images: garbage behind a PNG signature, a truncated JPEG, HTML")
    func notImages() throws {
        let garbage = Bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 0x41, count: 500))
        #expect(throws: (any Error).self) { try Self.thumbnailer.header(of: garbage) }
        #expect(throws: (any Error).self) { try Self.thumbnailer.header(of: Bytes(Array("<html>hi</html>".utf8))) }
        let whole = try Self.photo(800, 600)
        let truncated = Bytes(Array(whole.array.prefix(whole.count / 2)))
        #expect(throws: (any Error).self) {
            try Self.thumbnailer.thumbnail(of: truncated, ThumbnailSpec(width: 64, height: 64, format: .jpeg, quality: 80))
        }
    }

    @Test("the loader remembered for a signature: the same format read again, garbage behind it refused",
          arguments: [ImageFormat.jpeg, .png, .webp])
    func rememberedLoader(_ format: ImageFormat) throws {
        let image = try Self.thumbnailer.testImage(width: 40, height: 30, format: format)
        for _ in 0..<2 {  // the second read takes the loader remembered by the first
            let header = try Self.thumbnailer.header(of: image)
            #expect(header.format == format && header.width == 40 && header.height == 30)
        }
        let signature = Array(image.array.prefix(format == .webp ? 16 : 8))
        let garbage = Bytes(signature + [UInt8](repeating: 0x41, count: 400))
        #expect(throws: (any Error).self) { try Self.thumbnailer.header(of: garbage) }
        let gif = try Self.thumbnailer.header(of: Bytes(Self.twoFrameGIF))
        #expect(gif.pages == 2 && gif.format == nil)
    }

    @Test("a 1×20000 PNG asked at 256×256 cover is cropped before it is enlarged: the plan is small and bounded")
    func cropBeforeEnlarge() throws {
        let needle = try Self.photo(1, 20_000, format: .png)
        let header = try Self.thumbnailer.header(of: needle)
        let spec = ThumbnailSpec(width: 256, height: 256, format: .jpeg, quality: 80)
        let plan = try Self.thumbnailer.plan(header, spec)
        #expect(plan.crop == .init(left: 0, top: 9_999, width: 1, height: 1))
        #expect(plan.intermediatePixels == 0)
        #expect(plan.estimatedBytes < 8 << 20, "\(plan.estimatedBytes)")
        // The plan is what the lane admits and what the pipeline runs; a wall-clock bound here
        // only measured how loaded the machine was (0.17 s alone, 2.5 s beside the suite).
        let made = try Self.thumbnailer.thumbnail(of: needle, plan, control: ResizeControl(timeLimit: .seconds(60)))
        #expect((made.width, made.height) == (256, 256))
        // attention must scale the whole needle first: refused from the header.
        #expect(throws: ThumbnailerError.self) {
            try Self.thumbnailer.plan(header, ThumbnailSpec(width: 256, height: 256, gravity: .attention, format: .jpeg, quality: 80))
        }
        do {
            _ = try Self.thumbnailer.plan(header, ThumbnailSpec(width: 256, height: 256, gravity: .attention, format: .jpeg, quality: 80))
        } catch {
            guard case .tooCostly = error else { Issue.record("\(error)"); return }
        }
    }

    @Test("decoders thumbd chooses: BMP, ICO, JPEG XL, SVG and `BM…<svg` never reach a loader; ImageMagick is never mapped")
    func chosenDecoders() throws {
        let refused: [[UInt8]] = [
            TestImages.bmpHeaderOnly(width: 10_000, height: 10_000),
            TestImages.bmThenSVG,
            [0, 0, 1, 0, 1, 0, 16, 16] + [UInt8](repeating: 0, count: 40),  // ICO
            [0xFF, 0x0A] + [UInt8](repeating: 0, count: 40),  // JPEG XL codestream
            Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8),
            Array("%PDF-1.4\n".utf8),
        ]
        for body in refused {
            #expect(SourceFormat.sniff(Bytes(body)) == nil)
            #expect(throws: ThumbnailerError.unsupportedFormat) { try Self.thumbnailer.header(of: Bytes(body)) }
        }
        // Every format thumbd takes still reads (GIF, and the loaders of what it encodes).
        _ = try Self.thumbnailer.header(of: Bytes(Self.twoFrameGIF))
        for format in ImageFormat.allCases where format != .avif || Self.thumbnailer.canEncodeAVIF {
            let image = try Self.thumbnailer.testImage(width: 32, height: 16, format: format)
            #expect(try Self.thumbnailer.header(of: image).width == 32)
        }
        #expect(Thumbnailer.modulesRestricted)
        #expect(TestImages.mappedLibraries(matching: ["Magick", "libjxl", "poppler", "openslide"]) == [])
    }

    @Test("a WebP whose EXIF is 15 MB becomes a WebP thumbnail without it")
    func bigEXIF() throws {
        let simple = try Self.photo(64, 48, format: .webp)
        let heavy = Bytes(TestImages.webpWithEXIF(simple.array, width: 64, height: 48, exifBytes: 15 << 20))
        #expect(try Self.thumbnailer.header(of: heavy).width == 64)
        let made = try Self.thumbnailer.thumbnail(of: heavy, ThumbnailSpec(width: 32, height: nil, format: .webp, quality: 80))
        #expect(made.format == .webp && made.width == 32)
        #expect(made.body.count < 10_000)
    }

    @Test("failures are named by their step, the same whatever failed before")
    func errorsByStep() throws {
        let whole = try Self.photo(800, 600)
        let truncated = Bytes(Array(whole.array.prefix(whole.count / 2)))
        let spec = ThumbnailSpec(width: 64, height: 64, format: .jpeg, quality: 80)
        func outcome(_ body: Bytes) -> String {
            do {
                _ = try Self.thumbnailer.thumbnail(of: body, spec)
                return "ok"
            } catch {
                return switch error {
                case .notAnImage: "notAnImage"
                case .unsupportedFormat: "unsupported"
                default: "\(error)"
                }
            }
        }
        let garbage = Bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 0x41, count: 500))
        for _ in 0..<3 {
            #expect(outcome(truncated) == "notAnImage")
            #expect(outcome(garbage) == "notAnImage")
            #expect(outcome(Bytes(TestImages.bmThenSVG)) == "unsupported")
            #expect(outcome(whole) == "ok")
        }
        // AVIF above its bound is refused from the plan (its encode cannot be stopped).
        var settings = Thumbnailer.Configuration()
        settings.maxAVIFPixels = 10_000
        let bounded = try Thumbnailer(configuration: settings)
        #expect(throws: ThumbnailerError.self) {
            try bounded.plan(try bounded.header(of: whole), ThumbnailSpec(width: 200, height: 200, format: .avif, quality: 50))
        }
    }

    // MARK: Hand-made inputs

    /// A 2×2 GIF with two frames (red, then blue), looping.
    static let twoFrameGIF: [UInt8] = {
        var out = Array("GIF89a".utf8) + [2, 0, 2, 0, 0xF1, 0, 0]  // 2×2, global colour table of 4
        out += [0xFF, 0, 0, 0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF]  // red, blue, black, white
        out += [0x21, 0xFF, 0x0B] + Array("NETSCAPE2.0".utf8) + [3, 1, 0, 0, 0]  // loop forever
        for colour: UInt8 in [0, 1] {
            out += [0x21, 0xF9, 4, 0, 10, 0, 0, 0]  // 0.1 s per frame
            out += [0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0]  // image descriptor: 2×2, no local table
            // LZW, minimum code size 2: clear, four pixels of `colour`, end.
            out += [2] + lzw4(colour) + [0]
        }
        return out + [0x3B]
    }()

    /// Four pixels of one colour index, LZW-coded with 3-bit codes (clear 4, end 5).
    static func lzw4(_ colour: UInt8) -> [UInt8] {
        let codes: [UInt32] = [4, UInt32(colour), UInt32(colour), UInt32(colour), UInt32(colour), 5]
        var bits: UInt32 = 0
        var count = 0
        var bytes: [UInt8] = []
        var width = 3
        var next = 6
        for (index, code) in codes.enumerated() {
            bits |= code << count
            count += width
            while count >= 8 {
                bytes.append(UInt8(bits & 0xFF))
                bits >>= 8
                count -= 8
            }
            if index >= 2 && index < codes.count - 1 {  // each code after the first pixel adds a table entry
                next += 1
                if next == (1 << width) + 1 && width < 12 { width += 1 }
            }
        }
        if count > 0 { bytes.append(UInt8(bits & 0xFF)) }
        return [UInt8(bytes.count)] + bytes
    }
}
