import Configuration
import Crypto
import Foundation
import Support
import Synchronization

/// Signed URLs, as imgproxy and thumbor do them: with keys configured, a `/thumb` request
/// (or a batch item) is served only with `sig`, an HMAC-SHA256 of its canonical form under
/// one of the keys. Several keys may be configured at once, so that a new key can be rolled
/// out to the signers before the old one is retired.
///
/// The canonical form covers what decides the work thumbd does and the image it serves:
/// the `url` and the thumbnail parameters (`ThumbnailParameters.names`, `preset` included),
/// those present and not empty, sorted by name, each `name=value` with the value
/// percent-encoded (RFC 3986 unreserved characters kept), joined by `&`. `priority`,
/// `fallback` and anything else are not signed. `sig` is that HMAC in base64url without
/// padding (43 characters).
package struct URLSigner: Sendable {
    /// The keys, shared by every copy of this signer, so that a reload (SIGHUP) rotates them
    /// for every holder at once.
    private let ring: KeyRing

    /// The parameters the signature covers.
    package static let signedNames = ["url"] + ThumbnailParameters.names

    package init(keys: [String]) {
        ring = KeyRing(keys)
    }

    /// Signing is on when at least one key is configured.
    package var isEnabled: Bool { ring.isEnabled }

    /// Replaces the keys of this signer and of every copy of it.
    package func replaceKeys(_ keys: [String]) { ring.replace(keys) }

    private var keys: [Data] { ring.keys }

    /// The canonical text of a request whose parameters `value` reads.
    package static func canonical(_ value: (String) -> String?) -> String {
        signedNames.sorted().compactMap { name in
            guard let text = value(name), !text.isEmpty else { return nil }
            return name + "=" + QueryValue.encode(text)
        }.joined(separator: "&")
    }

    /// The `sig` for these parameters under the first key (the one signers use now).
    package func signature(_ value: (String) -> String?) -> String? {
        guard let key = keys.first else { return nil }
        let code = HMAC<SHA256>.authenticationCode(for: Data(Self.canonical(value).utf8), using: SymmetricKey(data: key))
        return Self.base64url(Data(code))
    }

    /// Whether `sig` is right for these parameters under any key; compared in constant time.
    package func verify(_ sig: String?, _ value: (String) -> String?) -> Bool {
        // Only the canonical spelling: base64's last character carries two spare bits.
        guard let sig, let code = Self.decodeBase64url(sig), code.count == SHA256.byteCount, Self.base64url(code) == sig
        else { return false }
        let message = Data(Self.canonical(value).utf8)
        return keys.contains {
            HMAC<SHA256>.isValidAuthenticationCode(code, authenticating: message, using: SymmetricKey(data: $0))
        }
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The keys' bytes (a `SymmetricKey` is made per use: it is not `Sendable`), and whether
    /// there are any, read without the lock on every request.
    private final class KeyRing: Sendable {
        private let current: Mutex<[Data]>
        private let enabled: Atomic<Bool>

        init(_ keys: [String]) {
            current = Mutex(keys.map { Data($0.utf8) })
            enabled = Atomic(!keys.isEmpty)
        }

        var isEnabled: Bool { enabled.load(ordering: .acquiring) }
        var keys: [Data] { current.withLock { $0 } }

        func replace(_ keys: [String]) {
            current.withLock { $0 = keys.map { Data($0.utf8) } }
            enabled.store(!keys.isEmpty, ordering: .releasing)
        }
    }

    static func decodeBase64url(_ text: String) -> Data? {
        guard text.utf8.count <= 64 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

/// Keys live under `signing.`.
package struct SigningConfiguration: Sendable {
    /// `signing.keys`: secrets (at least 16 characters each); empty (the default) turns
    /// signing off. The first signs (`thumbd sign`); all verify.
    package var keys: [String] = []

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "signing")
        keys = r.strings("keys", keys)
        try validate()
    }

    package func validate() throws {
        for key in keys {
            try require(key.utf8.count >= 16, "signing.keys", "each key must be at least 16 characters")
        }
    }

    package var signer: URLSigner { URLSigner(keys: keys) }
}
