internal import CVips
import Foundation
import Support

/// The bytes of an image still downloading, for a decode that reads them as they arrive
/// (`Thumbnailer.thumbnail(streaming:…)`): one writer appends, one reader (libvips, through
/// a `VipsSourceCustom`, or libjpeg, through its source manager: each read callback comes
/// here through a context pointer) takes them in order and waits while there are none. The
/// writer ends the feed: whole, or failed (the reader's next read fails, and so does the
/// decode). A cancel wakes a waiting reader the same way.
///
/// `@unchecked Sendable`: every field is read and written under `condition`'s lock.
public final class ByteFeed: @unchecked Sendable {  // every field only under `condition`'s lock
    private let condition = NSCondition()
    private var chunks: [[UInt8]] = []
    private var offset = 0  // into chunks[0]
    private var ended = false
    private var failed = false
    private var received = 0
    private var held = 0  // in chunks: arrived, not yet read
    private var head: [UInt8] = []
    /// How many of the first bytes `head` keeps (the header is read from them).
    public let headLimit: Int

    public init(headLimit: Int = 256 << 10) {
        self.headLimit = headLimit
    }

    /// Bytes that arrived, in order.
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return }
        chunks.append(Array(bytes))
        received += bytes.count
        held += bytes.count
        if head.count < headLimit { head.append(contentsOf: bytes.prefix(headLimit - head.count)) }
        condition.signal()
    }

    /// The end: every byte came (`whole`), or the bytes stop here and the decode fails.
    public func end(whole: Bool) {
        condition.lock()
        defer { condition.unlock() }
        guard !ended else { return }
        ended = true
        failed = !whole
        if failed {
            chunks = []
            held = 0
        }
        condition.signal()
    }

    /// Nobody will read it: the bytes kept are dropped, later ones are not kept, and a
    /// reader's next read fails.
    public func discard() {
        condition.lock()
        defer { condition.unlock() }
        ended = true
        failed = true
        chunks = []
        held = 0
        head = []
        condition.signal()
    }

    /// The first bytes (at most `headLimit`), and how many have arrived in all.
    public var start: (head: Bytes, received: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (Bytes(head), received)
    }

    /// Bytes arrived and not read yet.
    public var unread: Int {
        condition.lock()
        defer { condition.unlock() }
        return held
    }

    /// Whether the feed ended whole.
    public var isWhole: Bool {
        condition.lock()
        defer { condition.unlock() }
        return ended && !failed
    }

    /// The decoder's read (libvips's or libjpeg's): at most `length` bytes into `buffer`,
    /// waiting for some; 0 at the end, -1 once failed.
    func read(into buffer: UnsafeMutableRawPointer, length: Int) -> Int {
        condition.lock()
        defer { condition.unlock() }
        while chunks.isEmpty && !ended { condition.wait() }
        if failed { return -1 }
        guard !chunks.isEmpty else { return 0 }
        var copied = 0
        while copied < length, !chunks.isEmpty {
            let first = chunks[0]
            let count = min(length - copied, first.count - offset)
            first.withUnsafeBytes { source in
                (buffer + copied).copyMemory(from: source.baseAddress! + offset, byteCount: count)
            }
            copied += count
            offset += count
            held -= count
            if offset == first.count {
                chunks.removeFirst()
                offset = 0
            }
        }
        return copied
    }
}

/// One `VipsSource` reading a `ByteFeed`: owned here, freed in `deinit`. The feed is the
/// callback's context (unretained: this object holds it, and lives as long as the decode).
final class FeedSource {
    let raw: UnsafeMutablePointer<VipsSource>
    private let feed: ByteFeed

    init?(_ feed: ByteFeed) {
        self.feed = feed
        let read: thumbd_read_fn = { context, buffer, length in
            guard let context, let buffer, length > 0 else { return -1 }
            let feed = Unmanaged<ByteFeed>.fromOpaque(context).takeUnretainedValue()
            return gint64(feed.read(into: buffer, length: Int(length)))
        }
        guard let raw = thumbd_vips_source_new(read, Unmanaged.passUnretained(feed).toOpaque()) else { return nil }
        self.raw = raw
    }

    deinit { thumbd_vips_source_free(raw) }
}
