import Glibc
import Support
import Testing

@Suite("IPAddress: the one place text becomes an address")
struct IPAddressTests {
    @Test("IPv4 and IPv6 literals parse and print back", arguments: [
        "127.0.0.1", "93.184.216.34", "0.0.0.0", "::1", "2001:db8::1", "::ffff:10.0.0.1", "fe80::1",
    ])
    func roundTrip(_ text: String) throws {
        let address = try #require(IPAddress(text))
        #expect(IPAddress(address.description) == address)
        #expect(address.isIPv6 == text.contains(":"))
    }

    @Test("not addresses", arguments: ["", "localhost", "1.2.3", "256.1.1.1", "::1%lo", "[::1]", "1.2.3.4 "])
    func rejects(_ text: String) {
        #expect(IPAddress(text) == nil)
    }

    @Test("the legacy IPv4 spellings inet_aton accepts, and only those")
    func legacy() {
        #expect(IPAddress(legacyIPv4: "127.1") == .v4(0x7F00_0001))
        #expect(IPAddress(legacyIPv4: "2130706433") == .v4(0x7F00_0001))
        #expect(IPAddress(legacyIPv4: "0x7f000001") == .v4(0x7F00_0001))
        #expect(IPAddress(legacyIPv4: "0177.0.0.1") == .v4(0x7F00_0001))
        #expect(IPAddress(legacyIPv4: "example.org") == nil)
        #expect(IPAddress(legacyIPv4: "") == nil)
    }

    @Test("network-order bytes: 4 or 16 of them")
    func bytes() {
        #expect(IPAddress(bytes: [10, 1, 2, 3]) == IPAddress("10.1.2.3"))
        #expect(IPAddress(bytes: [UInt8](repeating: 0, count: 15) + [1]) == IPAddress("::1"))
        #expect(IPAddress(bytes: [1, 2, 3]) == nil)
    }

    @Test("the sockaddr it lends has the family, port and address in network order")
    func socketAddress() throws {
        try #require(IPAddress("192.0.2.7")).withSocketAddress(port: 8080) { pointer, length in
            #expect(length == socklen_t(MemoryLayout<sockaddr_in>.size))
            pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                #expect($0.pointee.sin_family == sa_family_t(AF_INET))
                #expect(UInt16(bigEndian: $0.pointee.sin_port) == 8080)
                #expect(UInt32(bigEndian: $0.pointee.sin_addr.s_addr) == 0xC000_0207)
            }
        }
        try #require(IPAddress("::1")).withSocketAddress(port: 443) { pointer, length in
            #expect(length == socklen_t(MemoryLayout<sockaddr_in6>.size))
            pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                #expect($0.pointee.sin6_family == sa_family_t(AF_INET6))
                #expect(UInt16(bigEndian: $0.pointee.sin6_port) == 443)
            }
        }
    }
}
