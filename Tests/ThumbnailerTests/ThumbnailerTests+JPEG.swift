import Support
import Testing
@testable import Thumbnailer

/// A still JPEG thumbnail is encoded in the resize's thread by libjpeg (CJPEG), not by
/// libvips's jpegsave on its workers: the same settings, read back from the markers of what
/// each writes, and the right pixels.
extension ThumbnailerTests {
    /// A JPEG's frame marker (0xC0 baseline, 0xC2 progressive), its components' sampling
    /// factors (h, v) and its quantisation tables' payloads, in order.
    struct Markers: Equatable {
        var frame: UInt8 = 0
        var sampling: [[UInt8]] = []
        var tables: [[UInt8]] = []

        init(_ body: Bytes) {
            let bytes = body.array
            var at = 2  // after SOI
            while at + 4 <= bytes.count, bytes[at] == 0xFF {
                let marker = bytes[at + 1]
                let length = Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
                let payload = Array(bytes[min(at + 4, bytes.count)..<min(at + 2 + length, bytes.count)])
                switch marker {
                case 0xDB: tables.append(payload)
                case 0xC0, 0xC1, 0xC2:
                    frame = marker
                    let count = Int(payload[5])
                    sampling = (0..<count).map { [payload[6 + $0 * 3 + 1] >> 4, payload[6 + $0 * 3 + 1] & 0x0F] }
                case 0xDA: return  // the scan: the header ends here
                default: break
                }
                at += 2 + length
            }
        }
    }

    @Test("a still JPEG is encoded with libvips's jpegsave settings: its quantisation tables and sampling at Q 90 and 95, subsampled below 90")
    func jpegSettingsAsLibvips() throws {
        // libvips's own jpegsave wrote these: the test image at Q 90, the quadrants at Q 95.
        let byLibvips90 = try Self.photo(400, 300)
        let byLibvips95 = try Self.thumbnailer.quadrants(width: 400, height: 300, format: .jpeg)
        let source = try Self.thumbnailer.quadrants(width: 400, height: 300, format: .png)
        for (quality, reference) in [(90, byLibvips90), (95, byLibvips95)] {
            let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 200, height: 150, fit: .fill, format: .jpeg,
                                                                               quality: quality))
            let mine = Markers(made.body), theirs = Markers(reference)
            #expect(mine.frame == 0xC0)
            #expect(mine.tables == theirs.tables, "Q \(quality)")
            #expect(mine.sampling == [[1, 1], [1, 1], [1, 1]])
            #expect(mine.sampling == theirs.sampling)
        }
        let low = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 200, height: 150, fit: .fill, format: .jpeg, quality: 80))
        #expect(Markers(low.body).sampling == [[2, 2], [1, 1], [1, 1]])
        #expect(Markers(low.body).tables != Markers(byLibvips90).tables)
    }

    @Test("the JPEG encoded in the resize's thread has the source's pixels, rows in order, and is progressive when asked")
    func jpegPixels() throws {
        let source = try Self.thumbnailer.quadrants(width: 400, height: 300, format: .png)
        for progressive in [false, true] {
            let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 200, height: 150, fit: .fill, format: .jpeg,
                                                                               quality: 90, progressive: progressive))
            #expect(Markers(made.body).frame == (progressive ? 0xC2 : 0xC0))
            let header = try Self.thumbnailer.header(of: made.body)
            #expect((header.width, header.height) == (200, 150))
            // Red top left, green top right, blue bottom left, yellow bottom right.
            for (x, y, colour) in [(50, 37, [255.0, 0, 0]), (150, 37, [0, 255, 0]), (50, 112, [0, 0, 255]), (150, 112, [255, 255, 0])] {
                let pixel = try Self.thumbnailer.pixel(of: made.body, x: x, y: y)
                #expect(zip(pixel, colour).allSatisfy { abs($0 - $1) <= 8 }, "\(x),\(y): \(pixel)")
            }
        }
    }

    /// How many times this thread has blocked (the kernel's count).
    static func blocked() -> Int {
        let status = (try? String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") }
        return line.flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? -1
    }

    @Test("a still JPEG's encode runs in the calling thread, not on libvips's workers the caller would wait for")
    func jpegEncodedInCallingThread() throws {
        // A large output, decoded at full size: libvips's jpegsave computes each strip on a
        // worker and hands it to the calling thread to compress, which blocks for each (about
        // 240 times here, at least once for each of the 188 strips). Encoded here, it blocks
        // only on GLib's locks it shares with other threads' libvips calls: 6 to 13 times with
        // the whole suite running beside it, 41 once in CI's (so the bound is half the old
        // path's, not a figure of this one).
        let body = try Self.photo(4000, 3000)
        let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: body),
                                             ThumbnailSpec(width: 4000, height: 3000, fit: .fill, format: .jpeg, quality: 95))
        let before = Self.blocked()
        _ = try Self.thumbnailer.thumbnail(of: body, plan, control: ResizeControl(timeLimit: StreamingTests.noLimit))
        let blocked = Self.blocked() - before
        #expect(before >= 0 && blocked < 120, "this thread blocked \(blocked) times")
    }

    @Test("a JPEG libjpeg refuses (wider than its 65,500 pixels) fails as .failed with libjpeg's reason; the next encode works")
    func jpegRefusedByLibjpeg() throws {
        // The daemon's own limits (w, h ≤ 8192, times dpr) never reach it; the thumbnailer's
        // do, and libjpeg's refusal comes back through its longjmp in the shim.
        let source = try Self.thumbnailer.quadrants(width: 400, height: 300, format: .png)
        let wide = ThumbnailSpec(width: 66_000, height: 10, fit: .fill, format: .jpeg, quality: 80)
        let refused = Result { () throws(ThumbnailerError) -> Thumbnail in try Self.thumbnailer.thumbnail(of: source, wide) }
        if case .failure(.failed(let reason)) = refused {
            #expect(reason.contains("65500"), "\(reason)")
        } else {
            Issue.record("a 66000-pixel-wide JPEG: \(refused)")
        }
        let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 200, height: 150, fit: .fill, format: .jpeg,
                                                                           quality: 80))
        #expect(try Self.thumbnailer.header(of: made.body).width == 200)
    }
}
