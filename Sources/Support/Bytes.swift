#if canImport(Glibc)
import Glibc
#endif

/// An immutable byte buffer shared, never copied, from the fetch to the store to every
/// response that sends it: libmicrohttpd sends straight from it and releases it when done.
/// It owns its memory (allocated once, or handed over by a `Builder`, and freed in
/// `deinit`), so the pointer it lends is stable for as long as anyone holds it; nothing
/// writes to it after `init`, which is the argument for `@unchecked Sendable`.
public final class Bytes: @unchecked Sendable, Equatable, CustomStringConvertible {  // immutable after init
    private let storage: UnsafeMutableRawPointer
    /// Kept alive exactly as long as the bytes (what accounts for their memory).
    private let keeper: AnyObject?

    public static let empty = Bytes([])

    public init(_ bytes: [UInt8]) {
        // The copy happens inside `withUnsafeBytes`: the pointer it lends is valid only there
        // (once inlined, a temporary array may be freed as soon as the closure returns).
        storage = bytes.withUnsafeBytes { Self.copy($0) }
        count = bytes.count
        keeper = nil
    }

    public init(copying buffer: UnsafeRawBufferPointer) {
        storage = Self.copy(buffer)
        count = buffer.count
        keeper = nil
    }

    private static func copy(_ buffer: UnsafeRawBufferPointer) -> UnsafeMutableRawPointer {
        let memory = allocate(buffer.count)
        if let base = buffer.baseAddress, buffer.count > 0 {
            memory.copyMemory(from: base, byteCount: buffer.count)
        }
        return memory
    }

    /// Takes over `storage` (from `malloc`), which holds `count` bytes, and `keeper`.
    private init(adopting storage: UnsafeMutableRawPointer, count: Int, keeper: AnyObject?) {
        self.storage = storage
        self.count = count
        self.keeper = keeper
    }

    private static func allocate(_ count: Int) -> UnsafeMutableRawPointer {
        guard let memory = malloc(max(1, count)) else { fatalError("out of memory (\(count) bytes)") }
        return memory
    }

    public convenience init(_ text: String) { self.init(Array(text.utf8)) }

    deinit { free(storage) }

    public let count: Int
    public var isEmpty: Bool { count == 0 }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: storage, count: count))
    }

    /// A copy, for tests and small checks.
    public var array: [UInt8] { withUnsafeBytes { Array($0) } }

    public func prefix(_ length: Int) -> [UInt8] { withUnsafeBytes { Array($0.prefix(length)) } }

    /// Lends the base address to C code that keeps it while it holds a retain on `self`.
    package var baseAddress: UnsafeRawPointer { UnsafeRawPointer(storage) }

    public static func == (a: Bytes, b: Bytes) -> Bool {
        a === b || (a.count == b.count && a.withUnsafeBytes { x in b.withUnsafeBytes { y in x.elementsEqual(y) } })
    }

    public var description: String { "Bytes(\(count))" }
}

extension Bytes {
    /// Bytes that arrive in pieces (a download), gathered in memory that the finished
    /// `Bytes` takes over: the body is written once, not copied again at the end.
    /// Used by one thread at a time.
    public struct Builder: ~Copyable {
        private var storage: UnsafeMutableRawPointer?
        public private(set) var capacity = 0
        public private(set) var count = 0

        public init() {}

        deinit { free(storage) }

        /// Makes room for `total` bytes in all (a `Content-Length` known in advance).
        public mutating func reserve(_ total: Int) {
            guard total > capacity else { return }
            guard let grown = realloc(storage, total) else { fatalError("out of memory (\(total) bytes)") }
            storage = grown
            capacity = total
        }

        public mutating func append(_ piece: UnsafeRawBufferPointer) {
            guard let base = piece.baseAddress, piece.count > 0 else { return }
            reserve(capacity(appending: piece.count))
            (storage! + count).copyMemory(from: base, byteCount: piece.count)
            count += piece.count
        }

        /// The room `append` grows to for `more` bytes: the capacity doubles (at least 16 KiB).
        public func capacity(appending more: Int) -> Int {
            count + more <= capacity ? capacity : max(count + more, capacity * 2, 16 * 1024)
        }

        /// The bytes gathered so far, lent for the call.
        public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            try body(UnsafeRawBufferPointer(start: storage, count: count))
        }

        /// The bytes gathered, handed over; the builder is empty again. Room grown past the
        /// body by more than an eighth (a body without a `Content-Length` doubles it) is
        /// given back first: the bytes may stay in the cache's memory for a long time.
        /// `keeper` lives as long as the bytes; `trimmed` is told their room, once taken.
        public mutating func take(keeper: AnyObject? = nil, trimmed: (Int) -> Void = { _ in }) -> Bytes {
            defer { storage = nil; capacity = 0; count = 0 }
            guard var memory = storage, count > 0 else {
                free(storage)  // room reserved for a body that never came
                trimmed(0)
                return Bytes([])
            }
            var room = capacity
            if capacity - count > count / 8, let shrunk = realloc(memory, count) {
                memory = shrunk
                room = count
            }
            trimmed(room)
            return Bytes(adopting: memory, count: count, keeper: keeper)
        }
    }
}

