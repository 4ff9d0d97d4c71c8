/// ASCII case folding, for the names protocols compare without case (HTTP header names,
/// host names): only A–Z change; every other byte, UTF-8's included, stays itself.
extension UInt8 {
    @inlinable package var asciiLowercased: UInt8 {
        self >= UInt8(ascii: "A") && self <= UInt8(ascii: "Z") ? self | 0x20 : self
    }
}

extension Collection<UInt8> {
    /// Whether the two hold the same bytes once A–Z are folded to a–z.
    @inlinable package func equalsIgnoringASCIICase(_ other: some Collection<UInt8>) -> Bool {
        count == other.count && zip(self, other).allSatisfy { $0.asciiLowercased == $1.asciiLowercased }
    }
}
