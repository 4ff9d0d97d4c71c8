import Support
import Testing

@Suite("ASCII case folding for header and host names")
struct ASCIICaseTests {
    @Test("only A-Z fold; other bytes, punctuation and UTF-8's, compare as themselves")
    func folding() {
        #expect(Array("X-Request-Id".utf8).equalsIgnoringASCIICase("x-request-ID".utf8))
        #expect(Array("LOCALHOST".utf8).equalsIgnoringASCIICase("localhost".utf8))
        #expect(!Array("@".utf8).equalsIgnoringASCIICase("`".utf8))  // 0x40 and 0x60: one bit apart, not a case
        #expect(!Array("^".utf8).equalsIgnoringASCIICase("~".utf8))
        #expect(![UInt8]([0xC3, 0x89]).equalsIgnoringASCIICase([0xE3, 0xA9]))  // "É" is not "é" here
        #expect(!Array("host".utf8).equalsIgnoringASCIICase("hosts".utf8))
        #expect(UInt8(ascii: "Q").asciiLowercased == UInt8(ascii: "q"))
        #expect(UInt8(ascii: "[").asciiLowercased == UInt8(ascii: "["))
        #expect(UInt8(0xC9).asciiLowercased == 0xC9)
    }
}
