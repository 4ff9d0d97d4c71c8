// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "thumbd",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "thumbd", targets: ["thumbd"]),
        .library(name: "ThumbdCore", targets: ["ThumbdCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: [.defaults, "YAML"]),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-system", from: "1.5.0"),
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

        // The logic: one folder per concern (Server, Fetch, Coalescing, Store, Config, Thumb, Service).
        .target(
            name: "ThumbdCore",
            dependencies: [
                "CMicroHTTPD", "CCurl", "CSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]),

        // Argument parsing only.
        .executableTarget(
            name: "thumbd",
            dependencies: [
                "ThumbdCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),

        // libFuzzer target for the parsers of untrusted input (scripts/fuzz); without
        // -DFUZZING it replays a corpus. Debug builds only (@testable import).
        .executableTarget(
            name: "ThumbdFuzz",
            dependencies: ["ThumbdCore"]),

        .testTarget(
            name: "ThumbdCoreTests",
            dependencies: ["ThumbdCore"]),
        .testTarget(
            name: "ThumbdIntegrationTests",
            dependencies: ["ThumbdCore"]),
    ],
    swiftLanguageModes: [.v6]
)
