internal import CMicroHTTPD
import Support

/// Reading a request out of libmicrohttpd: the headers handlers read and the query
/// arguments, each in one pass over what the request carries.
extension ServerCore {
    /// The request headers handlers read (`HTTPServer.Configuration.requestHeaders`), in one
    /// pass over the headers the request carries. Asking libmicrohttpd for each name in turn
    /// scanned every header once per name, measured each name's length every time, and
    /// retained and released each longer name: with nine names, 4% of a hot hit's
    /// instructions. The first occurrence of a name wins, as libmicrohttpd's lookup gives it.
    static func headers(_ connection: OpaquePointer, wanted: HeaderNames) -> Fields {
        var pick = HeaderPick(wanted: wanted)
        withUnsafeMutablePointer(to: &pick) { pick in
            _ = MHD_get_connection_values_n(connection, .HEADER_KIND, { cls, _, key, keySize, value, _ in
                guard let cls, let key else { return .YES }
                let pick = cls.assumingMemoryBound(to: HeaderPick.self)
                if let index = pick.pointee.wanted.index(of: UnsafeRawBufferPointer(start: key, count: keySize)) {
                    pick.pointee.fields.add(pick.pointee.wanted.names[index], value.map { String(cString: $0) } ?? "")
                }
                return .YES
            }, UnsafeMutableRawPointer(pick))
        }
        return pick.fields
    }

    static func queryArguments(_ connection: OpaquePointer) -> Fields {
        var query = Fields()
        withUnsafeMutablePointer(to: &query) { query in
            _ = MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, { cls, _, key, value in
                guard let cls, let key else { return .YES }
                cls.assumingMemoryBound(to: Fields.self).pointee.add(String(cString: key), value.map { String(cString: $0) } ?? "")
                return .YES
            }, UnsafeMutableRawPointer(query))
        }
        return query
    }
}

/// What `ServerCore.headers` fills while libmicrohttpd walks the headers.
private struct HeaderPick {
    let wanted: HeaderNames
    var fields = Fields()
}

/// Header names a handler reads, lower case, with their bytes: a header is compared only
/// with the names of its length, folding ASCII case as HTTP compares names (RFC 9110 §5.1).
struct HeaderNames: Sendable {
    let names: [String]
    private let bytes: [[UInt8]]

    init(_ names: [String]) {
        self.names = names.map { $0.lowercased() }
        bytes = self.names.map { Array($0.utf8) }
    }

    /// The index of the name `key` spells in any case, or nil.
    func index(of key: UnsafeRawBufferPointer) -> Int? {
        bytes.firstIndex { $0.equalsIgnoringASCIICase(key) }
    }
}
