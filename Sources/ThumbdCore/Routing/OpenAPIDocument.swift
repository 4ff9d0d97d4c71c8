import Support

/// `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API (`openapi.json` beside
/// this file, compiled in), its version this build's. A client for any language can be
/// generated from it; the tests validate it and fuzz the daemon against it (Schemathesis).
enum OpenAPIDocument {
    static let body = Bytes(Array(text.utf8))

    static let text = String(decoding: PackageResources.openapi_json, as: UTF8.self)
        .replacingOccurrences(of: "\"version\": \"VERSION\"", with: "\"version\": \"\(BuildInfo.version)\"")
}
