import Foundation
import Testing
@testable import ThumbdCore

/// `GET /openapi.json` says what the code does: every error code and its status, this
/// build's version. (The daemon is fuzzed from it by Schemathesis: scripts/smoke/test_22_openapi.sh.)
@Suite("The OpenAPI document")
struct OpenAPIDocumentTests {
    static func document() throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.body.array)) as? [String: Any])
    }

    @Test("it is OpenAPI 3.1 JSON with this build's version")
    func version() throws {
        let document = try Self.document()
        #expect(document["openapi"] as? String == "3.1.0")
        #expect((document["info"] as? [String: Any])?["version"] as? String == BuildInfo.version)
    }

    @Test("its Error schema lists every code a client can see, and each code's status is an answer of some operation")
    func errorCodes() throws {
        let document = try Self.document()
        let components = try #require(document["components"] as? [String: Any])
        let schemas = try #require(components["schemas"] as? [String: Any])
        let error = try #require(schemas["Error"] as? [String: Any])
        let properties = try #require(error["properties"] as? [String: Any])
        let listed = try #require((properties["error"] as? [String: Any])?["enum"] as? [String])
        let sent = ErrorCode.allCases.filter { $0 != .cancelled }
        #expect(Set(listed) == Set(sent.map(\.rawValue)))
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        var documented = Set<Int>()
        for operations in paths.values {
            for case let operation as [String: Any] in operations.values {
                for status in (operation["responses"] as? [String: Any])?.keys ?? [:].keys { if let n = Int(status) { documented.insert(n) } }
            }
        }
        for code in sent {
            #expect(documented.contains(code.status), "\(code.rawValue) (\(code.status)) is no operation's answer")
        }
    }

    @Test("every route the router answers is a path of the document")
    func routes() throws {
        let paths = Set(try #require(try Self.document()["paths"] as? [String: Any]).keys)
        #expect(paths == ["/thumb", "/batches", "/batches/{id}", "/batches/{id}/events", "/batches/{id}/focus",
                          "/batches/{id}/items", "/healthz", "/metrics", "/stats", "/cache", "/", "/thumbd.js",
                          "/thumbd.d.ts", "/openapi.json"])
    }
}
