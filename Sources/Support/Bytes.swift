/// An immutable byte buffer shared, never copied, from the fetch to the store to every
/// response that sends it: libmicrohttpd sends straight from it and releases it when done.
/// It owns its memory (allocated once, freed in `deinit`), so the pointer it lends is
/// stable for as long as anyone holds it; nothing writes to it after `init`, which is the
/// argument for `@unchecked Sendable`.
public final class Bytes: @unchecked Sendable, Equatable, CustomStringConvertible {
    private let storage: UnsafeMutableRawBufferPointer

    public static let empty = Bytes([])

    public init(_ bytes: [UInt8]) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 16)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, source.count > 0 {
                buffer.baseAddress!.copyMemory(from: base, byteCount: source.count)
            }
        }
        storage = buffer
        count = bytes.count
    }

    public init(copying buffer: UnsafeRawBufferPointer) {
        storage = .allocate(byteCount: max(1, buffer.count), alignment: 16)
        if let base = buffer.baseAddress, buffer.count > 0 {
            storage.baseAddress!.copyMemory(from: base, byteCount: buffer.count)
        }
        count = buffer.count
    }

    public convenience init(_ text: String) { self.init(Array(text.utf8)) }

    deinit { storage.deallocate() }

    public let count: Int
    public var isEmpty: Bool { count == 0 }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: storage.baseAddress, count: count))
    }

    /// A copy, for tests and small checks.
    public var array: [UInt8] { withUnsafeBytes { Array($0) } }

    public func prefix(_ length: Int) -> [UInt8] { withUnsafeBytes { Array($0.prefix(length)) } }

    /// Lends the base address to C code that keeps it while it holds a retain on `self`.
    package var baseAddress: UnsafeRawPointer { UnsafeRawPointer(storage.baseAddress!) }

    public static func == (a: Bytes, b: Bytes) -> Bool {
        a === b || (a.count == b.count && a.withUnsafeBytes { x in b.withUnsafeBytes { y in x.elementsEqual(y) } })
    }

    public var description: String { "Bytes(\(count))" }
}
