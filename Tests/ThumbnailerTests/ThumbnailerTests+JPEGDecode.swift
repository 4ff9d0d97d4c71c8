import Foundation
import Support
import Testing
@testable import Thumbnailer

/// A still JPEG is decoded by libjpeg itself at the eighth of its size the plan picks (CJPEG's
/// thumbd_jpeg_decode), also between libvips's loader's shrinks (3/8, 5/8, 6/8, 7/8): the
/// plan's choice, the exact size, the pixels, the EXIF orientation, damage and the control.
extension ThumbnailerTests {
    static func plan(_ width: Int, _ height: Int, _ spec: ThumbnailSpec, orientation: Int = 1) throws -> ThumbnailPlan {
        try thumbnailer.plan(ImageHeader(width: width, height: height, hasAlpha: false, pages: 1, orientation: orientation,
                                         source: .jpeg), spec)
    }

    @Test("the plan decodes with libjpeg at the smallest eighth that keeps the box; the loader decodes the whole size and the rest")
    func decodeEighthsChosen() throws {
        let fit512 = ThumbnailSpec(width: 512, height: 512, fit: .inside, format: .jpeg, quality: 80)
        let scene = try Self.plan(2040, 1356, fit512)  // imgproxy's scene: 1/2 would decode 1020x678
        #expect(scene.decodeEighths == 3 && scene.loadShrink == 2)  // 765x509, still at least 512 wide
        #expect(scene.resized == (512, 340) && scene.output == (512, 340))
        let width256 = ThumbnailSpec(width: 256, height: nil, format: .jpeg, quality: 80)
        #expect(try Self.plan(1200, 800, width256).decodeEighths == 2)  // 1/4, as the loader's shrink 4
        #expect(try Self.plan(4000, 3000, width256).decodeEighths == 1)  // 1/8
        #expect(try Self.plan(300, 200, width256).decodeEighths == 7)  // 263 wide, not 300
        #expect(try Self.plan(200, 100, width256).decodeEighths == nil)  // smaller than asked: whole, the loader
        #expect(try Self.plan(1536, 1024, ThumbnailSpec(width: 1024, height: nil, format: .jpeg, quality: 80)).decodeEighths == 6)
        // cover needs both sides: 3000x2000 to 1000x1000 keeps 1000 rows at 4/8, not 3/8 (750).
        #expect(try Self.plan(3000, 2000, ThumbnailSpec(width: 1000, height: 1000, fit: .cover, format: .jpeg, quality: 80))
            .decodeEighths == 4)
        // 5/8 of 8000x6000 is 5000x3750, more than the largest intermediate image (16 MP): the
        // loader, which streams its rows, decodes it at 1/1.
        let huge = try Self.plan(8000, 6000, ThumbnailSpec(width: 4500, height: nil, format: .jpeg, quality: 80))
        #expect(huge.decodeEighths == nil && huge.loadShrink == 1)
        #expect(try Self.plan(2400, 1600, ThumbnailSpec(width: 1600, height: nil, format: .jpeg, quality: 80)).decodeEighths == 6)
        // An animation, an image with alpha or CMYK (4 bands) goes to the loader.
        let cmyk = ImageHeader(width: 2040, height: 1356, hasAlpha: false, pages: 1, bands: 4, source: .jpeg)
        #expect(try Self.thumbnailer.plan(cmyk, fit512).decodeEighths == nil)
        let png = ImageHeader(width: 2040, height: 1356, hasAlpha: false, pages: 1, source: .png)
        #expect(try Self.thumbnailer.plan(png, fit512).decodeEighths == nil)
    }

    @Test("a JPEG decoded by libjpeg keeps the source's ratio exactly (300x600 at 3/8 to width 100 is 100x200, not 100x199) and its pixels")
    func decodeEighthsPixels() throws {
        let tall = try Self.photo(300, 600)
        let spec = ThumbnailSpec(width: 100, height: nil, format: .jpeg, quality: 80)
        #expect(try Self.thumbnailer.plan(Self.thumbnailer.header(of: tall), spec).decodeEighths == 3)
        let made = try Self.thumbnailer.thumbnail(of: tall, spec)
        #expect((made.width, made.height) == (100, 200))
        let header = try Self.thumbnailer.header(of: made.body)
        #expect((header.width, header.height) == (100, 200))
        // The quadrants come back where they were, at 3/8 and at 5/8.
        let source = try Self.thumbnailer.quadrants(width: 2040, height: 1356, format: .jpeg)
        for width in [512, 1200] {
            let fit = ThumbnailSpec(width: width, height: width, fit: .inside, format: .jpeg, quality: 90)
            let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: source), fit)
            #expect(plan.decodeEighths == (width == 512 ? 3 : 5))
            let thumb = try Self.thumbnailer.thumbnail(of: source, fit)
            let height = Int((Double(1356) * Double(width) / 2040).rounded())
            #expect((thumb.width, thumb.height) == (width, height))
            let (x1, x2, y1, y2) = (width / 4, width * 3 / 4, height / 4, height * 3 / 4)
            for (x, y, colour) in [(x1, y1, [255.0, 0, 0]), (x2, y1, [0, 255, 0]), (x1, y2, [0, 0, 255]), (x2, y2, [255, 255, 0])] {
                let pixel = try Self.thumbnailer.pixel(of: thumb.body, x: x, y: y)
                #expect(zip(pixel, colour).allSatisfy { abs($0 - $1) <= 8 }, "\(width): \(x),\(y): \(pixel)")
            }
        }
    }

    @Test("a JPEG decoded by libjpeg is turned by its EXIF orientation")
    func decodeEighthsOrientation() throws {
        // Stored 1356 wide and 2040 high, turned 90° (6): upright it is 2040x1356.
        let source = try Self.thumbnailer.quadrants(width: 1356, height: 2040, format: .jpeg, orientation: 6)
        let fit = ThumbnailSpec(width: 512, height: 512, fit: .inside, format: .png, quality: 80)
        #expect(try Self.thumbnailer.plan(Self.thumbnailer.header(of: source), fit).decodeEighths == 3)
        let made = try Self.thumbnailer.thumbnail(of: source, fit)
        #expect((made.width, made.height) == (512, 340))
        // Stored red top left, green top right, blue bottom left; turned clockwise, blue is top left.
        let pixel = try Self.thumbnailer.pixel(of: made.body, x: 128, y: 85)
        #expect(zip(pixel, [0.0, 0, 255]).allSatisfy { abs($0 - $1) <= 8 }, "\(pixel)")
    }

    @Test("a JPEG cut short fails libjpeg's decode (notAnImage, libjpeg's reason); not a JPEG fails too")
    func decodeEighthsDamaged() throws {
        let body = try Self.photo(2040, 1356)
        let fit = ThumbnailSpec(width: 512, height: 512, fit: .inside, format: .jpeg, quality: 80)
        let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: body), fit)
        #expect(plan.decodeEighths == 3)
        let control = { ResizeControl(timeLimit: StreamingTests.noLimit) }
        for cut in [Bytes(body.prefix(body.count * 2 / 3)), Bytes(body.prefix(600))] {
            let result = Result<Thumbnail, ThumbnailerError> { () throws(ThumbnailerError) -> Thumbnail in
                try Self.thumbnailer.thumbnail(of: cut, plan, control: control())
            }
            switch result {
            case .success: Issue.record("a JPEG of \(cut.count) of \(body.count) bytes made a thumbnail")
            case .failure(.notAnImage(let reason)): #expect(!reason.isEmpty)
            case .failure(let other): Issue.record("\(other)")
            }
        }
        #expect(throws: ThumbnailerError.self) {
            try Self.thumbnailer.thumbnail(of: Bytes(Array(repeating: 0x41, count: 4096)), plan, control: control())
        }
        // The next decode works.
        #expect(try Self.thumbnailer.thumbnail(of: body, plan, control: control()).width == 512)
    }

    @Test("a grey JPEG is decoded by libjpeg as one band: a grey thumbnail of the size asked, the same streamed")
    func decodeGrey() throws {
        let grey = try Self.thumbnailer.testImage(width: 1200, height: 800, grey: true)
        let header = try Self.thumbnailer.header(of: grey)
        #expect(header.bands == 1)
        let plan = try Self.thumbnailer.plan(header, ThumbnailSpec(width: 256, height: nil, format: .jpeg, quality: 80))
        #expect(plan.decodeEighths == 2)
        let control = { ResizeControl(timeLimit: StreamingTests.noLimit) }
        let made = try Self.thumbnailer.thumbnail(of: grey, plan, control: control())
        #expect((made.width, made.height) == (256, 171))
        for (x, y) in [(10, 10), (128, 85), (250, 165)] {
            let pixel = try Self.thumbnailer.pixel(of: made.body, x: x, y: y)
            #expect((pixel.max() ?? 0) - (pixel.min() ?? 0) <= 3, "\(x),\(y): \(pixel)")  // grey: its channels equal
        }
        let streamed = try Self.thumbnailer.thumbnail(streaming: StreamingTests.feed(grey), plan, control: control())
        #expect(streamed.body == made.body)
    }

    @Test("libjpeg's decode stops at its control: past the time limit")
    func decodeEighthsStopped() throws {
        let body = try Self.photo(2040, 1356)
        let plan = try Self.thumbnailer.plan(Self.thumbnailer.header(of: body),
                                             ThumbnailSpec(width: 512, height: 512, fit: .inside, format: .jpeg, quality: 80))
        #expect(plan.decodeEighths == 3)
        #expect(throws: ThumbnailerError.timedOut(.microseconds(1))) {
            try Self.thumbnailer.thumbnail(of: body, plan, control: ResizeControl(timeLimit: .microseconds(1)))
        }
    }
}
