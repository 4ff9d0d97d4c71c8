import Support
import Testing

@Suite("Bytes: one buffer from the download to every response")
struct BytesTests {
    @Test("a builder gathers pieces, with or without a size known in advance, into the bytes it hands over",
          arguments: [nil, 10, 100_000])
    func builder(_ reserved: Int?) {
        var builder = Bytes.Builder()
        if let reserved { builder.reserve(reserved) }
        var expected: [UInt8] = []
        for piece in 0..<50 {
            let chunk = (0..<(piece * 97 % 3000)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ piece) }
            chunk.withUnsafeBytes { builder.append($0) }
            expected += chunk
        }
        #expect(builder.count == expected.count)
        let bytes = builder.take()
        #expect(bytes.array == expected)
        #expect(builder.count == 0)
        #expect(builder.take().isEmpty)  // used up: empty again
    }

    @Test("holds a copy, compares by content, and the empty buffer is empty")
    func basics() {
        var source: [UInt8] = [1, 2, 3]
        let bytes = Bytes(source)
        source[0] = 9
        #expect(bytes.array == [1, 2, 3])
        #expect(bytes == Bytes([1, 2, 3]))
        #expect(bytes != Bytes([1, 2]))
        #expect(Bytes.empty.count == 0)
        // From temporaries, as `Bytes(text)` makes them: the copy is taken while they live.
        for size in [1, 15, 16, 2_081, 4_096, 100_000] {
            let text = String(repeating: "{\"id\":\"0123456789abcdef\"}", count: size / 25 + 1)
            #expect(Bytes(text).array == Array(text.utf8))
            #expect(Bytes(Array(repeating: UInt8(size & 0xFF), count: size)).array == Array(repeating: UInt8(size & 0xFF), count: size))
        }
        var builder = Bytes.Builder()
        #expect(builder.take() == Bytes.empty)
    }
}
