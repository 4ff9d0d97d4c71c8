import Foundation
import Logging
import Support
@testable import ThumbdCore

/// A real daemon on 127.0.0.1, port 0, with its own temporary directory and SQLite file.
package final class TestDaemon: @unchecked Sendable {  // fields are set once in init
    package let directory: URL
    package let configuration: ThumbdConfiguration
    package private(set) var daemon: Thumbd?

    package var port: UInt16 { daemon!.port }
    package var thumbd: Thumbd { daemon! }

    /// `configure` adjusts the defaults; loopback origins are allowed unless it says otherwise.
    /// With `start` false the daemon is made but not started (a test runs it as a service).
    package init(directory: URL? = nil, start: Bool = true, logger given: Logger? = nil,
                 _ configure: (inout ThumbdConfiguration) -> Void = { _ in }) throws {
        startLibvipsFirst()
        let directory = directory ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("thumbd-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var configuration = ThumbdConfiguration()
        configuration.server.listen = "127.0.0.1:0"
        configuration.server.threads = 2
        configuration.server.shutdownGraceSeconds = 0.5
        configuration.store.path = directory.appendingPathComponent("cache.sqlite").path
        configuration.upstream.allowPrivateNetworks = true
        // Gated origins stay silent for as long as a test holds them; on a loaded machine
        // that can pass the default 10 s, and the fetch would end in 504 mid-test.
        configuration.upstream.lowSpeedSeconds = 120
        configuration.upstream.timeoutMilliseconds = 300_000
        // A resize runs at nice 10, below every test's own threads; with the whole suite at
        // once on two cores a 400x200 crop has passed the default 10 s. A test of the limit
        // sets its own.
        configuration.thumbnails.timeLimitSeconds = 300
        configure(&configuration)
        self.directory = directory
        self.configuration = configuration
        var logger = given ?? Logger(label: "thumbd.test")
        if given == nil { logger.logLevel = .warning }
        ProcessLimits.raiseOpenFiles()
        let daemon = Thumbd(configuration: configuration, logger: logger)
        if start { try daemon.start() }
        self.daemon = daemon
    }

    /// Graceful shutdown; the directory stays for a restart with `TestDaemon(directory:)`.
    package func stop() {
        daemon?.shutdown()
        daemon = nil
    }

    package func remove() {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { remove() }
}

/// The preamble of most integration tests: a real origin and a real daemon (adjusted by
/// `configure`), both stopped when `body` returns or throws.
package func withOriginAndDaemon(_ configure: (inout ThumbdConfiguration) -> Void = { _ in },
                                 _ body: (TestOrigin, TestDaemon) async throws -> Void) async throws {
    let origin = try await TestOrigin()
    let daemon = try TestDaemon(configure)
    defer { daemon.remove(); origin.stop() }
    try await body(origin, daemon)
}
