import Foundation
import Logging
@testable import ThumbdCore

/// A real daemon on 127.0.0.1, port 0, with its own temporary directory and SQLite file.
final class TestDaemon: @unchecked Sendable {  // fields are set once in init
    let directory: URL
    let configuration: ThumbdConfiguration
    private(set) var daemon: Thumbd?

    var port: UInt16 { daemon!.port }
    var thumbd: Thumbd { daemon! }

    /// `configure` adjusts the defaults; loopback origins are allowed unless it says otherwise.
    init(directory: URL? = nil, _ configure: (inout ThumbdConfiguration) -> Void = { _ in }) throws {
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
        configure(&configuration)
        self.directory = directory
        self.configuration = configuration
        var logger = Logger(label: "thumbd.test")
        logger.logLevel = .warning
        daemon = try Thumbd(configuration: configuration, logger: logger)
    }

    /// Graceful shutdown; the directory stays for a restart with `TestDaemon(directory:)`.
    func stop() {
        daemon?.shutdown()
        daemon = nil
    }

    func remove() {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { remove() }
}
