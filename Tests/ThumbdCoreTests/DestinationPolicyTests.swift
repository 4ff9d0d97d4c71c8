import Testing
import Support
@testable import ThumbdCore

@Suite("DestinationPolicy")
struct DestinationPolicyTests {
    @Test("private, loopback, link-local, multicast and reserved addresses are not public",
          arguments: ["127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
                      "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1",
                      "fd12:3456::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2001:db8::1"])
    func notPublic(_ text: String) throws {
        let address = try #require(IPAddress(text))
        #expect(!address.isPublic)
    }

    @Test("IPv6 spellings of private IPv4 are not public: compatible, translated, 6to4, NAT64, Teredo",
          arguments: ["::127.0.0.1", "::7f00:1", "::10.0.0.1", "::ffff:0:127.0.0.1", "::ffff:0:192.168.0.1",
                      "2002:7f00:1::", "2002:c0a8:101::1", "64:ff9b::127.0.0.1", "64:ff9b::10.1.1.1",
                      "64:ff9b:1::8.8.8.8", "2001:0:4136:e378:8000:63bf:80ff:fffe", "100::1", "2001:2::1"])
    func embeddedPrivate(_ text: String) throws {
        #expect(!(try #require(IPAddress(text))).isPublic)
    }

    @Test("IPv6 spellings of public IPv4 stay public", arguments: ["2002:808:808::1", "64:ff9b::8.8.8.8", "::ffff:0:8.8.8.8"])
    func embeddedPublic(_ text: String) throws {
        #expect(try #require(IPAddress(text)).isPublic)
    }

    @Test("legacy IPv4 spellings (as curl reads them) and zone indexes are refused before any connection",
          arguments: ["127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0", "0x7f.1", "10.1", "[::1%25lo]",
                      "[fe80::1%25eth0]"])
    func legacySpellings(_ host: String) {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        #expect(throws: ThumbdError.self) { try policy.validate("http://\(host):8080/a.jpg") }
        do {
            _ = try policy.validate("http://\(host):8080/a.jpg")
        } catch {
            #expect(error.code == .destinationNotAllowed)
        }
        #expect((try? DestinationPolicy(allowPrivateNetworks: true, allowHosts: []).validate("http://\(host):8080/a.jpg")) != nil)
    }

    @Test("localhost and every name under it are refused before any lookup (RFC 6761), saying which setting allows them",
          arguments: ["localhost", "localhost.", "LOCALHOST", "foo.localhost", "a.b.localhost.", "images.localhost"])
    func localhostNames(_ host: String) {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        do {
            _ = try policy.validate("http://\(host)/a.jpg")
            Issue.record("\(host) was allowed")
        } catch {
            #expect(error.code == .destinationNotAllowed)
            #expect(error.message.contains("upstream.allowPrivateNetworks"))
        }
        #expect((try? DestinationPolicy(allowPrivateNetworks: true, allowHosts: []).validate("http://\(host)/a.jpg")) != nil)
        // Names that merely contain the word are ordinary names.
        #expect((try? policy.validate("http://localhost.example.org/a.jpg")) != nil)
        #expect((try? policy.validate("http://mylocalhost/a.jpg")) != nil)
    }

    @Test("control characters and spaces are malformed; a normalized URL is its own normal form (found by fuzzing)")
    func controlCharacters() throws {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        for raw in ["http://example.org/a\u{0}b", "http://example.org/a b", "http://example.org/\nx", "http://example.org/\u{7F}"] {
            #expect(throws: ThumbdError.self) { try policy.validate(raw) }
        }
        for raw in ["http://example.org/caf\u{E9}.jpg", "http://example.org/%E2%82%AC?q=%zz", "http://EXAMPLE.org:80/a/../b#x",
                    "http://5%2dat\u{74A}aFj", "http://b\u{FC}cher.example/a.jpg"] {
            let once = try policy.validate(raw)
            #expect(try policy.validate(once.url) == once, "\(raw)")
        }
    }

    @Test("the host checked and connected to is the URL's own (IDNA): a name percent-encoded or in Unicode is judged as curl will ask for it (found by fuzzing)")
    func internationalHosts() throws {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        let unicode = try policy.validate("http://b\u{FC}cher.example/a.jpg")
        #expect(unicode.url == "http://xn--bcher-kva.example/a.jpg" && unicode.host == "xn--bcher-kva.example")
        let encoded = try policy.validate("http://5%2dat\u{74A}aFj")
        #expect(encoded.url == "http://\(encoded.host)/" && encoded.host.hasPrefix("xn--"))
        // A host that is no name once normalized (`=`, a percent-encoded byte, an IDNA form that
        // does not read back) is malformed.
        for raw in ["http://5y%3dat\u{74A}aFj", "http://5y%2dat\u{74A}aFj", "http://xn--5y-atafj-pvp/", "http://a=b.org/", "http://a%3db.org/", "http://a%00b.org/"] {
            #expect(throws: ThumbdError.self, "\(raw)") { try policy.validate(raw) }
        }
        // The allow list meets the name as it is fetched.
        let listed = DestinationPolicy(allowPrivateNetworks: false, allowHosts: ["xn--bcher-kva.example"])
        #expect(try listed.validate("http://b\u{FC}cher.example/a.jpg").host == "xn--bcher-kva.example")
        // A full-width `localhost` is `localhost` once normalized: refused before any lookup.
        do {
            let local = try policy.validate("http://\u{FF4C}\u{FF4F}\u{FF43}\u{FF41}\u{FF4C}\u{FF48}\u{FF4F}\u{FF53}\u{FF54}/a.jpg")
            #expect(!local.url.contains("//localhost"), "\(local.url) was allowed")
        } catch {
            #expect(error.status == 403 || error.status == 400, "\(error)")
        }
    }

    @Test("the length limit holds for the normalized URL: one that percent-encoding takes past it is too long (found by fuzzing)")
    func normalizedLength() throws {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        let path = String(repeating: "\u{E9}", count: 1500)  // 3000 bytes raw, 9000 percent-encoded
        do {
            _ = try policy.validate("https://example.org/" + path)
            Issue.record("a URL of 9000 bytes once normalized was accepted")
        } catch {
            #expect(error.code == .urlTooLong && error.status == 400)
        }
        let fits = try policy.validate("https://example.org/" + String(repeating: "\u{E9}", count: 600))
        #expect(try policy.validate(fits.url) == fits)
    }

    @Test("a port outside 1-65535 is a malformed URL", arguments: ["99999", "70000", "0", "65536"])
    func portRange(_ port: String) {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        do {
            _ = try policy.validate("http://example.org:\(port)/a.jpg")
            Issue.record("accepted port \(port)")
        } catch {
            #expect(error.code == .malformedURL)
            #expect(error.status == 400)
        }
    }

    @Test("ordinary addresses are public",
          arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "192.169.0.1", "2606:2800:220:1::1", "::ffff:8.8.8.8"])
    func isPublic(_ text: String) throws {
        #expect(try #require(IPAddress(text)).isPublic)
    }

    @Test("a valid URL is normalized: scheme and host lower-cased, default port and fragment dropped")
    func normalization() throws {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        let destination = try policy.validate("HTTPS://Example.ORG:443/a/B.jpg?x=1#frag")
        #expect(destination.url == "https://example.org/a/B.jpg?x=1")
        #expect(destination.host == "example.org")
        #expect(try policy.validate("http://example.org").url == "http://example.org/")
        #expect(try policy.validate("http://example.org:8080/x").url == "http://example.org:8080/x")
    }

    @Test("bad URLs are 400, refused destinations 403")
    func refusals() {
        let policy = DestinationPolicy(allowPrivateNetworks: false, allowHosts: ["example.org", "*.cdn.net"])
        func code(_ url: String?) -> String? {
            do {
                _ = try policy.validate(url)
                return nil
            } catch {
                return "\(error.status) \(error.code)"
            }
        }
        #expect(code(nil) == "400 missing_url")
        #expect(code("") == "400 missing_url")
        #expect(code("example.org/a.jpg") == "400 malformed_url")
        #expect(code("file:///etc/passwd") == "400 unsupported_scheme")
        #expect(code("http://user:pw@example.org/") == "400 credentials_in_url")
        #expect(code("http://" + String(repeating: "a", count: 5000) + ".org/") == "400 url_too_long")
        #expect(code("http://other.org/a.jpg") == "403 host_not_allowed")
        #expect(code("http://example.org/a.jpg") == nil)
        #expect(code("http://img.cdn.net/a.jpg") == nil)
        #expect(code("http://cdn.net/a.jpg") == nil)
        #expect(code("http://evilcdn.net/a.jpg") == "403 host_not_allowed")
        let open = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
        #expect((try? open.validate("http://192.168.0.10/a.jpg")) == nil)
        #expect((try? open.validate("http://[::1]/a.jpg")) == nil)
        let lenient = DestinationPolicy(allowPrivateNetworks: true, allowHosts: [])
        #expect((try? lenient.validate("http://127.0.0.1:8000/a.jpg")) != nil)
    }
}
