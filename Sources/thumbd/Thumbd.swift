import ArgumentParser
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Support
import ThumbdCore

@main
struct ThumbdCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "thumbd",
        abstract: "A local caching proxy for images.",
        version: BuildInfo.text,
        subcommands: [Serve.self, Warm.self, Stats.self, Purge.self, Sign.self, Check.self, Health.self, Backup.self, Compact.self],
        defaultSubcommand: Serve.self)

    /// As ArgumentParser's, but a `Failure` (a start-up failure that is not a usage error)
    /// prints its message alone and exits with its own status.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch let failure as Failure {
            FileHandle.standardError.write(Data("thumbd: \(failure.message)\n".utf8))
            Glibc.exit(failure.exitCode)
        } catch {
            exit(withError: error)
        }
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the daemon until SIGINT or SIGTERM.",
        discussion: """
            Settings come from the file (--config; else config/thumbd.yaml in the working directory, \
            else /etc/thumbd/thumbd.yaml, when present), then THUMBD_* environment variables \
            (THUMBD_UPSTREAM_MAX_PER_HOST for upstream.maxPerHost), then these flags. An unknown key \
            in the file, or a THUMBD_* variable within 3 edits of a setting's, refuses the start; \
            other THUMBD_* variables (Kubernetes's THUMBD_SERVICE_HOST, …) are logged and ignored. Exit status: 0 after SIGINT or SIGTERM, 78 for a \
            setting that is wrong, 1 when the daemon cannot start (the port is taken, the cache file \
            cannot be written or is held by another thumbd). SIGHUP reopens log.file and reloads the \
            settings: signing.keys, log.level and the allowed hosts, origins and destinations change \
            live, the rest is logged as needing a \
            restart; a file that does not load keeps the running settings. SIGUSR1 reopens log.file alone.
            """)

    @Option(help: "A YAML or JSON settings file.")
    var config: String?

    @Option(help: "HOST:PORT to listen on (server.listen).")
    var listen: String?

    @Option(help: "The SQLite cache file (store.path).")
    var db: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical (log.level).")
    var logLevel: String?

    func validate() throws {
        if let logLevel, Logger.Level(rawValue: logLevel) == nil {
            throw ValidationError("unknown log level \(logLevel): trace, debug, info, notice, warning, error or critical")
        }
    }

    func run() async throws {
        // Before anything else: a SIGTERM from here on stops the daemon cleanly, exit 0.
        let shutdown = ShutdownSignals()
        let stopSignals = shutdown.catchSignals(on: DispatchQueue(label: "thumbd.stop-signals"))
        defer { stopSignals.forEach { $0.cancel() } }
        let file = config ?? ThumbdConfiguration.defaultFile()
        var overrides: [String: String] = [:]
        if let listen { overrides["server.listen"] = listen }
        if let db { overrides["store.path"] = db }
        if let logLevel { overrides["log.level"] = logLevel }
        // A setting that is wrong is not a usage error: no usage text, EX_CONFIG.
        let settings: ThumbdConfiguration
        let output: LogOutput
        do {
            settings = try await ThumbdConfiguration.load(file: file, overrides: overrides)
            output = try LogOutput(format: settings.log.format, path: settings.log.file)
        } catch let error as ConfigurationError {
            throw Failure(error.description, exitCode: 78)
        }
        output.level = settings.log.level
        LoggingSystem.bootstrap { label in output.handler(label: label) }
        let logger = Logger(label: "thumbd")
        logger.info("config", metadata: ["config.file": "\(file.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "none: the built-in defaults")"])
        if !settings.ignoredVariables.isEmpty {
            // Names only: a value may be a secret.
            logger.notice("config.ignored: THUMBD_ variables that name no setting", metadata: [
                "variables": "\(settings.ignoredVariables.joined(separator: ","))",
            ])
        }
        signal(SIGPIPE, SIG_IGN)
        // SIGUSR1 reopens log.file (logrotate moved it), as nginx's; SIGHUP also reads the
        // settings again and applies what can change live (below, once the daemon runs).
        signal(SIGHUP, SIG_IGN)
        signal(SIGUSR1, SIG_IGN)
        let signals = DispatchQueue(label: "thumbd.signals")
        let reopen: @Sendable () -> Void = {
            if let failure = output.reopen() {
                logger.error("log.reopen failed; still writing to the old file", metadata: ["error": "\(failure)"])
            } else {
                logger.notice("log.reopened", metadata: ["log.file": "\(settings.log.file ?? "standard error")"])
            }
        }
        let user1 = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: signals)
        user1.setEventHandler(handler: reopen)
        user1.resume()
        defer { user1.cancel() }
        ProcessLimits.raiseOpenFiles()  // every open event stream is a socket
        let daemon = Thumbd(configuration: settings, logger: logger)
        do {
            try await daemon.buildOffThePool()  // as `Thumbd.run` builds it
        } catch {
            throw Self.failure(error)
        }
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: signals)
        hangup.setEventHandler { [overrides] in
            reopen()
            Task {
                do {
                    let reloaded = try await ThumbdConfiguration.load(file: file, overrides: overrides)
                    let report = daemon.reload(reloaded) { output.level = $0 }
                    logger.notice("config.reloaded", metadata: [
                        "config.file": "\(file ?? "none")",
                        "applied": "\(report.applied.isEmpty ? "-" : report.applied.joined(separator: ","))",
                        "restart.needed": "\(report.needRestart.isEmpty ? "-" : report.needRestart.joined(separator: ","))",
                    ])
                } catch {
                    logger.error("config.reload refused; the running settings stay", metadata: ["error": "\(error)"])
                }
            }
        }
        hangup.resume()
        defer { hangup.cancel() }
        // The daemon's parts, one service each, in one group: each starts its part once the
        // one before it has started; SIGTERM or SIGINT (caught above) starts the graceful
        // shutdown, which stops them in reverse order (Thumbd.services) and then ends
        // `run()`. A part that fails to start stops the ones before it the same way.
        let group = daemon.serviceGroup()
        shutdown.attach(group)
        // "listening" only once every part has started, the server included.
        let announce = Task {
            guard await daemon.started() else { return }
            // HOST:PORT or [IPv6]:PORT: the host is what comes before the last colon, brackets kept.
            let listen = settings.server.listen
            let host = listen.lastIndex(of: ":").map { listen[..<$0] } ?? Substring(listen)
            FileHandle.standardOutput.write(Data("thumbd listening on http://\(host):\(daemon.port)\n".utf8))
        }
        defer { announce.cancel() }
        do {
            try await group.run()
        } catch {
            // A failed start stopped what it had started: said as a stop says it.
            Self.logThreadsLeft(logger)
            throw Self.failure(error)
        }
        Self.logThreadsLeft(logger)
    }

    /// How a daemon that could not start ends: a setting (EX_CONFIG), or anything else (1).
    static func failure(_ error: any Error) -> Failure {
        switch error {
        case let error as ConfigurationError: Failure(error.description, exitCode: 78)
        case let error as ThumbdError: Failure(error.message, exitCode: 1)
        default: Failure("\(error)", exitCode: 1)
        }
    }

    /// Every thread the daemon started must have ended by now, after a stop or a failed
    /// start (the process would end them anyway; saying so here is how a test sees a
    /// component that forgot one).
    static func logThreadsLeft(_ logger: Logger) {
        // A stopped thread signals that it is done a moment before the kernel ends it: up to
        // a second for the last ones to go.
        var left = ThreadName.living(withPrefixes: ["thumbd-", "MHD-"])
        for _ in 0..<100 where !left.isEmpty {
            usleep(10_000)
            left = ThreadName.living(withPrefixes: ["thumbd-", "MHD-"])
        }
        if left.isEmpty {
            logger.info("thumbd.exit", metadata: ["threads.left": "0"])
        } else {
            logger.error("thumbd.exit with threads still running", metadata: ["threads.left": "\(left.joined(separator: ","))"])
        }
    }
}

/// A start-up failure that is not a usage error: its message alone on standard error, and
/// its exit status (no usage text, which would point at the wrong problem).
struct Failure: Error, CustomStringConvertible {
    let message: String
    let exitCode: Int32
    init(_ message: String, exitCode: Int32) {
        self.message = message
        self.exitCode = exitCode
    }
    var description: String { message }
}
