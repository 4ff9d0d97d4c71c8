import Foundation

public enum QueryValue {
    /// Percent-encodes `text` as one query value: only RFC 3986 unreserved ASCII stays.
    /// (`CharacterSet.alphanumerics` would let non-ASCII letters through unencoded.)
    public static func encode(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? text
    }

    private static let unreserved = CharacterSet(charactersIn:
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
