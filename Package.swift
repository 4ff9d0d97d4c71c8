// swift-tools-version: 6.2
import PackageDescription

// The arrows: thumbd → ThumbdCore → {HTTPServer, Upstream, BlobStore, Thumbnailer} → C modules, with
// Support (bytes, addresses, thread names, free memory) under all of them. Each C library's
// module is a dependency of exactly one wrapper target (CMalloc, a header of libc itself, is
// Support's), and no wrapper depends on ThumbdCore, so the compiler refuses a layer that
// leans the wrong way.
let package = Package(
    name: "thumbd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "thumbd", targets: ["thumbd"]),
        // For a Swift app or tool (Linux, macOS, iOS): images, batches as typed events, the
        // daemon's admin calls (DaemonClient).
        .library(name: "ThumbdClient", targets: ["ThumbdClient"]),
    ],
    // Each dependency at one exact version (Package.resolved is not committed): a build
    // today and a build next year resolve the same code. The README says how to move them.
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-configuration", exact: "1.4.0", traits: [.defaults, "YAML"]),
        .package(url: "https://github.com/apple/swift-crypto", exact: "3.12.3"),
        .package(url: "https://github.com/apple/swift-system", exact: "1.8.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", exact: "2.4.1"),
        .package(url: "https://github.com/jpsim/Yams", exact: "6.2.2"),
        // The Swift client library: HTTP on Linux and Apple platforms. (mattt/EventSource 1.1.1
        // does not build on Linux: its client uses URLSession.bytes, which swift-corelibs-foundation
        // lacks; the library parses the stream with its own EventStreamParser.)
        .package(url: "https://github.com/swift-server/async-http-client", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", exact: "2.101.3"),
    ],
    targets: [
        // One thin system-library target per C library: module map + pkg-config + apt provider.
        .systemLibrary(
            name: "CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(
            name: "CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CVips", pkgConfig: "vips",
            providers: [.apt(["libvips-dev"])]),
        .systemLibrary(
            name: "CJPEG", pkgConfig: "libjpeg",
            providers: [.apt(["libjpeg-dev"])]),
        // glibc's allocator controls (malloc.h): a header of libc, no library to link.
        .systemLibrary(name: "CMalloc"),

        // What every layer shares and none owns: the byte buffer, IP addresses, thread names, the
        // process's free memory.
        .target(
            name: "Support",
            dependencies: ["CMalloc", .product(name: "Logging", package: "swift-log")]),

        // One wrapper per C library. None of them knows a product type.
        .target(
            name: "HTTPServer",
            dependencies: ["CMicroHTTPD", "Support", .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "Upstream",
            dependencies: ["CCurl", "Support", .product(name: "Logging", package: "swift-log")],
            exclude: ["DECISIONS.md"]),  // design notes beside the code
        .target(
            name: "BlobStore",
            dependencies: ["CSQLite", "Support", .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "Thumbnailer",
            dependencies: ["CVips", "CJPEG", "Support"]),

        // The product: routing, /thumb, batches, events, coalescing, policy, processing.
        .target(
            name: "ThumbdCore",
            dependencies: [
                "HTTPServer", "Upstream", "BlobStore", "Thumbnailer", "Support",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Yams", package: "Yams"),
            ],
            // Design notes beside the code they describe.
            exclude: ["Batches/DECISIONS.md", "Batches/PATH.md", "Daemon/LIFECYCLE.md"],
            // The HTTP API's OpenAPI document, compiled in (GET /openapi.json): no bundle to
            // install beside the binary.
            resources: [.embedInCode("Routing/openapi.json")]),

        // The client library (Linux and Apple platforms), what `thumbd warm|stats|purge|health`
        // use: images, batches as typed events, the admin calls, on AsyncHTTPClient.
        .target(
            name: "ThumbdClient",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                "EventStream",
            ]),

        // The text/event-stream parser (the HTML standard's): the client library's, the tests',
        // and the fuzzer's, which must not pull in SwiftNIO.
        .target(name: "EventStream"),

        // A blocking HTTP/1.1 client of loopback sockets: what the tests use to speak to the
        // daemon byte for byte (Linux).
        .target(
            name: "LoopbackClient",
            dependencies: ["Support"]),

        // Argument parsing and the service group.
        .executableTarget(
            name: "thumbd",
            dependencies: [
                "ThumbdCore", "ThumbdClient",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]),

        // libFuzzer target for the parsers of untrusted input (scripts/fuzz); without
        // -DFUZZING it replays a corpus. Debug builds only (@testable import).
        .executableTarget(
            name: "ThumbdFuzz",
            dependencies: ["ThumbdCore", "Upstream", "Support", "EventStream"]),

        // Test support: a daemon on an ephemeral port, a real origin, one raw HTTP client.
        .target(
            name: "ThumbdTesting",
            dependencies: ["ThumbdCore", "LoopbackClient", "EventStream", "Thumbnailer", "Support"],
            path: "Tests/ThumbdTesting"),

        // Test support: a suite trait that keeps blocking tests off the cooperative pool.
        .target(name: "TestThreads", dependencies: ["Support"], path: "Tests/TestThreads"),

        .testTarget(name: "SupportTests", dependencies: ["Support"]),
        .testTarget(
            name: "HTTPServerTests",
            dependencies: ["HTTPServer", "LoopbackClient", "EventStream", "Support", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "UpstreamTests", dependencies: ["Upstream", "Support", "ThumbdTesting"]),
        .testTarget(name: "BlobStoreTests", dependencies: ["BlobStore", "Support", "TestThreads"]),
        .testTarget(name: "LoopbackClientTests", dependencies: ["LoopbackClient", "EventStream", "ThumbdTesting"]),
        .testTarget(name: "ThumbnailerTests", dependencies: ["Thumbnailer", "CVips", "Support", "ThumbdTesting", "TestThreads"]),
        .testTarget(
            name: "ThumbdCoreTests",
            dependencies: ["ThumbdCore", "Upstream", "BlobStore", "HTTPServer", "Thumbnailer", "Support"]),
        .testTarget(
            name: "ThumbdIntegrationTests",
            dependencies: [
                "ThumbdCore", "ThumbdTesting", "TestThreads", "LoopbackClient", "EventStream", "ThumbdClient", "Upstream", "BlobStore", "HTTPServer", "Thumbnailer", "Support",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
