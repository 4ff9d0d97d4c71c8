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
        var builder = Bytes.Builder()
        #expect(builder.take() == Bytes.empty)
    }
}
