import ArgumentParser
import Dispatch
import Foundation
import Logging
import ThumbdCore

@main
struct ThumbdCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "thumbd",
        abstract: "A local caching proxy for images.",
        subcommands: [Serve.self],
        defaultSubcommand: Serve.self)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the daemon until SIGINT or SIGTERM.",
        discussion: """
            Settings come from the file (default config/thumbd.yaml when present), then THUMBD_* \
            environment variables (THUMBD_UPSTREAM_MAX_PER_HOST for upstream.maxPerHost), then these flags.
            """)

    @Option(help: "A YAML or JSON settings file.")
    var config: String?

    @Option(help: "HOST:PORT to listen on (server.listen).")
    var listen: String?

    @Option(help: "The SQLite cache file (store.path).")
    var db: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = ProcessInfo.processInfo.environment["THUMBD_LOG_LEVEL"] ?? "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("unknown log level \(logLevel)")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let file = config ?? (FileManager.default.fileExists(atPath: "config/thumbd.yaml") ? "config/thumbd.yaml" : nil)
        var overrides: [String: String] = [:]
        if let listen { overrides["server.listen"] = listen }
        if let db { overrides["store.path"] = db }
        let settings: ThumbdConfiguration
        do {
            settings = try await ThumbdConfiguration.load(file: file, overrides: overrides)
        } catch let error as ConfigurationError {
            throw ValidationError(error.description)
        }
        signal(SIGPIPE, SIG_IGN)
        let daemon = try Thumbd(configuration: settings, logger: Logger(label: "thumbd"))
        let host = settings.server.listen.split(separator: ":").dropLast().joined(separator: ":")
        FileHandle.standardOutput.write(Data("thumbd listening on http://\(host):\(daemon.port)\n".utf8))
        await Self.waitForTerminationSignal()
        daemon.shutdown()
    }

    private static func waitForTerminationSignal() async {
        let queue = DispatchQueue(label: "thumbd.signals")
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once = OnceFlag()
            var sources: [any DispatchSourceSignal] = []
            for number in [SIGINT, SIGTERM] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler {
                    if once.set() { continuation.resume() }
                }
                source.resume()
                sources.append(source)
            }
            Signals.keep(sources)
        }
    }
}

/// Keeps the signal sources alive for the life of the process.
private enum Signals {
    nonisolated(unsafe) static var sources: [any DispatchSourceSignal] = []
    static func keep(_ sources: [any DispatchSourceSignal]) { self.sources = sources }
}

private final class OnceFlag: @unchecked Sendable {  // only touched on the signals queue
    private var done = false
    func set() -> Bool {
        defer { done = true }
        return !done
    }
}
