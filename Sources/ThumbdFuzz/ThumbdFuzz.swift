// libFuzzer entry for thumbd's parsers of untrusted input: the destination policy (URL
// validation, address classification, every IPv4 spelling), /thumb's query, batch JSON,
// origin header lines, the request-line check, Host/Origin handling, the SSE parser and the
// image header check. The first byte of an input picks the parser (0xFF: the image header
// check, added after the corpus was laid out by `% 8`); the rest is its input. Besides "no crash",
// each checks a property (bounds, idempotence, agreement).
//
//   scripts/fuzz [SECONDS]                 a bounded run (scripts/test runs 60 s)
//   swift run ThumbdFuzz Tests/Fuzz/corpus replays the kept corpus (no instrumentation)
//
// Debug builds only: it reads internals through @testable import.
import Foundation
@testable import HTTPServer
import Support
import EventStream
@testable import ThumbdCore
@testable import Upstream

enum Fuzz {
    static let strict = DestinationPolicy(allowPrivateNetworks: false, allowHosts: [])
    static let listed = DestinationPolicy(allowPrivateNetworks: false, allowHosts: ["example.org", "*.cdn.net"])
    static let requestGuard = RequestGuard(listenHost: "127.0.0.1", allowedHosts: ["thumbd.internal"],
                                           allowedOrigins: ["https://app.example"])
    static let connections = ConnectionGuard(limits: .init(maxConnections: 16, idleTimeout: .seconds(60),
                                                           requestTimeout: .seconds(20), maxQueryParameters: 64), loops: 1,
                                             render: { Response(status: $0.status) }, refusalID: { nil })

    static func one(_ input: [UInt8]) {
        guard let selector = input.first else { return }
        let rest = Array(input.dropFirst())
        if selector == 0xFF { return imageHeader(rest) }
        let text = String(decoding: rest, as: UTF8.self)
        switch selector % 8 {
        case 0: destination(text)
        case 1: address(text)
        case 2: query(text)
        case 3: _ = try? BatchRequest(body: Bytes(rest), maxItems: 1000)
        case 4: originHeaders(rest)
        case 5: requestLine(rest)
        case 6: hostAndOrigin(text)
        default:
            var parser = EventStreamParser()
            parser.feed(rest)
            _ = parser.takeEvents()
        }
    }

    /// An accepted URL normalizes to itself, and never names a private address literally.
    static func destination(_ text: String) {
        for policy in [strict, listed] {
            guard let accepted = try? policy.validate(text) else { continue }
            let again = try? policy.validate(accepted.url)
            precondition(again == accepted, "normalizing is not idempotent: \(text) -> \(accepted.url) -> \(String(describing: again?.url))")
            precondition(!accepted.host.contains("%"), "a zone index passed: \(text)")
            if let address = IPAddress(accepted.host) ?? IPAddress(legacyIPv4: accepted.host) {
                precondition(address.isPublic, "a private address passed: \(text)")
            }
        }
    }

    /// Where both parsers read an address, they read the same one.
    static func address(_ text: String) {
        let standard = IPAddress(text)
        let legacy = IPAddress(legacyIPv4: text)
        _ = standard?.isPublic
        _ = legacy?.isPublic
        if case .v4? = standard, let legacy { precondition(legacy == standard, "\(text) read two ways") }
    }

    static func query(_ text: String) {
        var query: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(parts[0])
            let value = parts.count > 1 ? String(parts[1]).removingPercentEncoding ?? String(parts[1]) : ""
            if query[key] == nil { query[key] = value }
        }
        let request = Request(method: "GET", path: "/thumb", query: Fields(query))
        _ = try? ThumbRequest.wantsPlaceholder(request)
        _ = try? ThumbRequest(request, policy: strict, avif: true, offered: [.jpeg, .webp, .avif])
    }

    /// Any bytes: read without a read out of bounds, and what is accepted has sides within
    /// its format's limits.
    static func imageHeader(_ bytes: [UInt8]) {
        guard let type = ImageSniffer.contentType(of: Array(bytes.prefix(64))),
              let accepted = bytes.withUnsafeBytes({ ImageHeaderCheck.dimensions(of: $0, contentType: type) })
        else { return }
        precondition((1...1_000_000).contains(accepted.width) && (1...1_000_000).contains(accepted.height),
                     "accepted \(accepted) from \(bytes.count) bytes")
    }

    /// Whatever the lines, what is kept stays within its bounds.
    static func originHeaders(_ bytes: [UInt8]) {
        var headers = OriginHeaders()
        for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            let ok = line.withUnsafeBytes { headers.take($0) }
            if !ok { break }
        }
        precondition((headers.etag?.utf8.count ?? 0) <= OriginHeaders.maxETagBytes)
        precondition((headers.lastModified?.utf8.count ?? 0) <= OriginHeaders.maxDateBytes)
        precondition((headers.date?.utf8.count ?? 0) <= OriginHeaders.maxDateBytes)
        precondition((headers.cacheControl?.utf8.count ?? 0) <= OriginHeaders.maxCacheControlBytes)
        precondition((headers.expires?.utf8.count ?? 0) <= OriginHeaders.maxDateBytes)
    }

    /// The request-line check reads a C string to its end and nothing past it (fd -1: its
    /// refusals fail harmlessly).
    static func requestLine(_ bytes: [UInt8]) {
        let line = bytes.map { $0 == 0 ? 0x20 : CChar(bitPattern: $0) } + [0]
        connections.started(-1, loop: 0)
        line.withUnsafeBufferPointer { connections.requestLine(-1, loop: 0, uri: $0.baseAddress!) }
        connections.closed(-1, loop: 0)
    }

    static func hostAndOrigin(_ text: String) {
        let parts = text.split(separator: "\n", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
        var headers: [String: String] = [:]
        if parts.count > 0 { headers["host"] = parts[0] }
        if parts.count > 1 { headers["origin"] = parts[1] }
        if parts.count > 2 { headers["content-type"] = parts[2] }
        for method in ["GET", "POST", "DELETE", "OPTIONS"] {
            let request = Request(method: method, path: "/batches", headers: Fields(headers))
            _ = requestGuard.check(request)
            _ = requestGuard.corsHeaders(request)
        }
        _ = RequestGuard.hostName(text)
    }
}

#if FUZZING
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    Fuzz.one(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// SwiftPM links an executable's entry as `<target>_main`; libFuzzer's driver is entered
/// from there (looked up at run time: `LLVMFuzzerRunDriver` is libFuzzer's C API).
@_cdecl("ThumbdFuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    typealias Callback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    typealias Driver = @convention(c) (UnsafeMutablePointer<CInt>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>, Callback) -> CInt
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "LLVMFuzzerRunDriver") else {  // RTLD_DEFAULT
        fatalError("LLVMFuzzerRunDriver is missing: build with -sanitize=fuzzer")
    }
    var argc = argc
    var argv = argv
    return unsafeBitCast(symbol, to: Driver.self)(&argc, &argv, fuzzerTestOneInput)
}
#else
/// Replays corpus files (or every file in corpus directories) without instrumentation.
@main
struct Replay {
    static func main() throws {
        var count = 0
        for argument in CommandLine.arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory)
            let files = isDirectory.boolValue
                ? try FileManager.default.contentsOfDirectory(atPath: argument).sorted().map { argument + "/" + $0 }
                : [argument]
            for file in files {
                Fuzz.one(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
                count += 1
            }
        }
        print("replayed \(count) inputs")
    }
}
#endif
