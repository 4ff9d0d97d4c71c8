import Dispatch
import Foundation
import Support
import TestThreads
import Testing
import ThumbdTesting
@testable import Thumbnailer

/// The libvips wrapper on images it draws itself: sizes, formats, orientation, alpha, and
/// the refusals (not an image, too many pixels, truncated).
@Suite("Thumbnailer", .ownThreads)
struct ThumbnailerTests {
    static let thumbnailer = try! Thumbnailer()

    static func photo(_ width: Int, _ height: Int, alpha: Bool = false, format: ImageFormat = .jpeg,
                      orientation: Int = 1) throws -> Bytes {
        try thumbnailer.testImage(width: width, height: height, alpha: alpha, format: format, orientation: orientation)
    }

    /// (fit, the 1200×800 source into 256×256) → the size every format must give.
    static let expected: [(Fit, Int, Int)] = [(.cover, 256, 256), (.contain, 256, 256), (.fill, 256, 256), (.inside, 256, 171)]

    @Test("these tests, which block in libvips, run on threads of their own, not on the cooperative pool")
    func offThePool() throws {
        #expect(ThreadName.current == ThreadPerJob.threadName, "\(ThreadName.current)")
    }

    @Test("canEncodeAVIF, asked of libheif at start, says what an AVIF encode does")
    func avifCapabilityAgreesWithAnEncode() {
        // The capability is asked (a HEIF saver, an AV1 encoder), not tried: the tests of AVIF
        // answers skip when it says no, so a wrong no would hide them all.
        let encoded = (try? Self.thumbnailer.testImage(width: 16, height: 16, format: .avif)).map { !$0.isEmpty } ?? false
        #expect(Self.thumbnailer.canEncodeAVIF == encoded)
    }

    @Test("every fit × format gives the expected size, and the format asked for", arguments: [ImageFormat.jpeg, .png, .webp, .avif])
    func fitsAndFormats(_ format: ImageFormat) throws {
        if format == .avif && !Self.thumbnailer.canEncodeAVIF { return }
        let source = try Self.photo(1200, 800)
        for (fit, width, height) in Self.expected {
            let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 256, height: 256, fit: fit, format: format, quality: 80))
            #expect((made.width, made.height) == (width, height), "\(fit) \(format)")
            let header = try Self.thumbnailer.header(of: made.body)
            #expect((header.width, header.height) == (width, height))
            #expect(header.format == format, "\(header.source)")
            #expect(made.format == format)
        }
    }

    @Test("one side keeps the aspect ratio; inside never enlarges")
    func aspect() throws {
        let source = try Self.photo(1200, 800)
        let wide = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 300, height: nil, format: .jpeg, quality: 80))
        #expect((wide.width, wide.height) == (300, 200))
        let tall = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: nil, height: 100, format: .jpeg, quality: 80))
        #expect((tall.width, tall.height) == (150, 100))
        let small = try Self.photo(100, 50)
        let inside = try Self.thumbnailer.thumbnail(of: small, ThumbnailSpec(width: 400, height: 400, fit: .inside, format: .png, quality: 80))
        #expect((inside.width, inside.height) == (100, 50))
        let oneSide = try Self.thumbnailer.thumbnail(of: small, ThumbnailSpec(width: 400, height: nil, format: .png, quality: 80))
        #expect((oneSide.width, oneSide.height) == (100, 50))
    }

    @Test("EXIF orientation is applied (6: rotated 90°), and the metadata is stripped")
    func orientation() throws {
        let source = try Self.photo(400, 200, orientation: 6)
        #expect(try Self.thumbnailer.header(of: source).width == 400)
        let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 100, height: nil, format: .jpeg, quality: 80))
        #expect((made.width, made.height) == (100, 200))  // upright: portrait
        #expect(made.body.count < 20_000)
        #expect(!made.body.array.starts(with: [0xFF, 0xD8, 0xFF, 0xE1]))  // no EXIF segment first
    }

    @Test("alpha: kept in PNG and WebP, padded transparent by contain; flattened for JPEG")
    func alpha() throws {
        let source = try Self.photo(300, 100, alpha: true, format: .png)
        #expect(try Self.thumbnailer.header(of: source).hasAlpha)
        for format in [ImageFormat.png, .webp] {
            let made = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 90, height: 90, fit: .contain, format: format, quality: 80))
            let header = try Self.thumbnailer.header(of: made.body)
            #expect(header.hasAlpha && header.width == 90 && header.height == 90)
        }
        let jpeg = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 90, height: 90, fit: .contain, format: .jpeg, quality: 80))
        #expect(try !Self.thumbnailer.header(of: jpeg.body).hasAlpha)
        let opaque = try Self.thumbnailer.thumbnail(of: try Self.photo(300, 100), ThumbnailSpec(width: 90, height: 90, fit: .contain, format: .png, quality: 80))
        #expect(try Self.thumbnailer.header(of: opaque.body).hasAlpha)  // transparent padding added
    }

    @Test("an animated GIF: its frames are counted, and the thumbnail is its first frame")
    func animatedGIF() throws {
        let gif = Bytes(Self.twoFrameGIF)
        let header = try Self.thumbnailer.header(of: gif)
        #expect(header.pages == 2)
        #expect((header.width, header.height) == (2, 2))
        let made = try Self.thumbnailer.thumbnail(of: gif, ThumbnailSpec(width: 2, height: nil, format: .png, quality: 80))
        #expect((made.width, made.height) == (2, 2))  // one frame, not the two stacked
    }

    @Test("the output limit is checked before any work")
    func outputLimit() throws {
        var settings = Thumbnailer.Configuration()
        settings.maxOutputPixels = 10_000
        let strict = try Thumbnailer(configuration: settings)
        #expect(throws: ThumbnailerError.outputTooLarge(width: 200, height: 200, limit: 10_000)) {
            try strict.thumbnail(of: try Self.photo(400, 400), ThumbnailSpec(width: 200, height: 200, format: .jpeg, quality: 80))
        }
    }

    @Test("a resize past its time limit is killed")
    func timeLimit() throws {
        var settings = Thumbnailer.Configuration()
        settings.timeLimit = .microseconds(1)
        let hurried = try Thumbnailer(configuration: settings)
        let source = try Self.photo(3000, 2000)
        #expect(throws: ThumbnailerError.timedOut(.microseconds(1))) {
            try hurried.thumbnail(of: source, ThumbnailSpec(width: 2000, height: nil, format: .png, quality: 80))
        }
    }

    @Test("the JPEG decode shrink leaves at least the pixels the fit needs")
    func jpegShrink() {
        func shrink(_ width: Int, _ height: Int, _ w: Int?, _ h: Int?, _ fit: Fit, orientation: Int = 1) -> Int {
            let source = ImageHeader(width: width, height: height, hasAlpha: false, pages: 1, orientation: orientation, source: .jpeg)
            return ThumbnailPlan.jpegShrink(source, ThumbnailSpec(width: w, height: h, fit: fit, format: .jpeg, quality: 80))
        }
        #expect(shrink(4000, 3000, 256, nil, .cover) == 8)  // 4000/256 = 15.6: libvips's own choice would be 4
        #expect(shrink(4000, 3000, 256, 256, .cover) == 8)  // both sides ≥ 256 after 1/8: 500×375
        #expect(shrink(1200, 800, 256, 256, .cover) == 2)  // 1/4 would give 200 rows < 256
        #expect(shrink(1200, 800, 256, 256, .inside) == 4)  // inside: the width decides (300×200 ≥ 256×171)
        #expect(shrink(3000, 4000, 256, nil, .cover, orientation: 6) == 8)  // rotated: 4000 wide once upright
        #expect(shrink(3000, 4000, nil, 1000, .cover, orientation: 6) == 2)
        #expect(shrink(300, 200, 256, nil, .cover) == 1)
    }

    // MARK: Hostile inputs

    @Test("the crop keeps the centre at the box's aspect, turned with the EXIF orientation; outputs are exact")
    func cropsAndOrientation() throws {
        let wide = try Self.photo(1200, 400)
        let plan = try Self.thumbnailer.plan(try Self.thumbnailer.header(of: wide), ThumbnailSpec(width: 100, height: 100, format: .jpeg, quality: 80))
        #expect(plan.coverAspect.map { [$0.width, $0.height] } == [100, 100])
        #expect(plan.cut(loaded: (1200, 400)) == .init(left: 400, top: 0, width: 400, height: 400))
        let turned = try Self.photo(400, 200, orientation: 6)  // 200×400 once upright
        for (w, h) in [(100, 50), (50, 100), (64, 64)] {
            let made = try Self.thumbnailer.thumbnail(of: turned, ThumbnailSpec(width: w, height: h, format: .png, quality: 80))
            #expect((made.width, made.height) == (w, h))
        }
        #expect(ThumbnailPlan.centreCrop(of: (10, 10), aspect: (1, 1)) == nil)
        #expect(ThumbnailPlan.centreCrop(of: (1, 20_000), aspect: (8192, 1953)) == .init(left: 0, top: 9_999, width: 1, height: 1))
    }

    @Test("a resize cancelled while it runs stops at its next tile")
    func cancelled() throws {
        let source = try Self.photo(3000, 3000)
        let control = ResizeControl(timeLimit: .seconds(30))
        let plan = try Self.thumbnailer.plan(try Self.thumbnailer.header(of: source), ThumbnailSpec(width: 2900, height: 2900, format: .png, quality: 80))
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { control.cancel() }
        // Finished before the cancel, it would return an image; stopped by it, it fails as cancelled.
        #expect(throws: ThumbnailerError.cancelled) { try Self.thumbnailer.thumbnail(of: source, plan, control: control) }
        let early = ResizeControl(timeLimit: .seconds(30))
        early.cancel()
        #expect(throws: ThumbnailerError.cancelled) { try Self.thumbnailer.thumbnail(of: source, plan, control: early) }
    }
}
