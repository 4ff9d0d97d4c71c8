import ArgumentParser
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Support
import ThumbdClient
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
            try await daemon.startOffThePool()  // as `Thumbd.run` starts it
        } catch {
            // A failed start stopped what it had started: said as a stop says it.
            Self.logThreadsLeft(logger)
            switch error {
            case let error as ConfigurationError: throw Failure(error.description, exitCode: 78)
            case let error as ThumbdError: throw Failure(error.message, exitCode: 1)
            default: throw Failure("\(error)", exitCode: 1)
            }
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
        // The daemon's parts, one service each, in one group: SIGTERM or SIGINT (caught
        // above) starts the graceful shutdown, which stops them in reverse order
        // (Thumbd.services) and then ends `run()`. The group exists before "listening".
        let group = ServiceGroup(configuration: .init(services: daemon.services.map { .init(service: $0) }, logger: logger))
        shutdown.attach(group)
        let host = settings.server.listen.split(separator: ":").dropLast().joined(separator: ":")
        FileHandle.standardOutput.write(Data("thumbd listening on http://\(host):\(daemon.port)\n".utf8))
        try await group.run()
        Self.logThreadsLeft(logger)
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

/// Where the client subcommands find the daemon.
struct ServerOption: ParsableArguments {
    @Option(help: "The running daemon (default: $THUMBD_URL, else http://127.0.0.1:8080).")
    var server: String = ProcessInfo.processInfo.environment["THUMBD_URL"] ?? "http://127.0.0.1:8080"
}

struct Warm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Prefetch a list of URLs through a running daemon, with a progress bar.",
        discussion: "Reads one URL per line (blank lines and # comments skipped). Exits 1 if any failed.")

    @Argument(help: "A file of URLs, or - for standard input.")
    var file: String

    @Option(help: "high, normal or low.")
    var priority: String?

    @OptionGroup var thumbnail: ThumbnailOptions

    @Flag(help: "Print the events as JSON lines instead of a progress bar.")
    var json = false

    @OptionGroup var signing: SigningKeyOption

    @OptionGroup var server: ServerOption

    func run() async throws {
        let text: String
        if file == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else {
            guard let contents = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
            text = String(decoding: contents, as: UTF8.self)
        }
        let urls = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        var warmer = Warmer(
            client: DaemonClient(server: server.server), priority: priority, json: json, interactive: isatty(2) == 1,
            output: { FileHandle.standardOutput.write(Data($0.utf8)) },
            progress: { FileHandle.standardError.write(Data($0.utf8)) })
        warmer.thumbnail = thumbnail.parameters
        if let key = try await signing.resolvedKey() {
            let signer = URLSigner(keys: [key])
            warmer.sign = { [thumbnail = warmer.thumbnail] url in signer.signature { $0 == "url" ? url : thumbnail[$0] } }
        }
        let report: Warmer.Report
        do {
            report = try await warmer.run(urls: urls)
        } catch let error as DaemonError {
            throw ValidationError(error.description)
        }
        if !report.failed.isEmpty {
            var lines = "\(report.failed.count) of \(report.total) failed:\n"
            for failure in report.failed {
                lines += "  \(failure.status) \(failure.error)  \(failure.url)\n"
            }
            FileHandle.standardError.write(Data(lines.utf8))
            throw ExitCode(1)
        }
    }
}


struct Sign: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a signed /thumb link for a URL (when the daemon has signing.keys).",
        discussion: "The signature covers the url and the thumbnail parameters; see the README.")

    @Argument(help: "The image URL.")
    var url: String

    @OptionGroup var thumbnail: ThumbnailOptions

    @OptionGroup var signing: SigningKeyOption

    @OptionGroup var server: ServerOption

    func run() async throws {
        guard let key = try await signing.resolvedKey() else {
            throw ValidationError("no signing key: pass --sign-key, set THUMBD_SIGNING_KEY or signing.keys")
        }
        var parameters = thumbnail.parameters
        parameters["url"] = url
        let sig = URLSigner(keys: [key]).signature { parameters[$0] }!
        let query = URLSigner.signedNames.compactMap { name in parameters[name].map { "\(name)=\(QueryValue.encode($0))" } }
        let base = server.server.hasSuffix("/") ? String(server.server.dropLast()) : server.server
        print(base + "/thumb?" + (query + ["sig=\(sig)"]).joined(separator: "&"))
    }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show what the running daemon holds and how it served.")

    @Flag(help: "Print the daemon's JSON as it is.")
    var json = false

    @OptionGroup var server: ServerOption

    func run() async throws {
        let body: [UInt8]
        do {
            body = try await DaemonClient(server: server.server).stats()
        } catch let error as DaemonError {
            throw ValidationError(error.description)
        }
        if json {
            FileHandle.standardOutput.write(Data(body))
            return
        }
        let stats: DaemonStats
        do {
            stats = try JSONDecoder().decode(DaemonStats.self, from: Data(body))
        } catch {
            throw ValidationError("thumbd's /stats answer is not what this thumbd reads: \(error)")
        }
        let lines = [
            "objects      \(stats.objects)",
            "bytes        \(Warmer.size(Double(stats.bytes))) of \(Warmer.size(Double(stats.maxBytes)))",
            "hit ratio    \(String(format: "%.1f%%", stats.hitRatio * 100)) (hits \(stats.hits), misses \(stats.misses), coalesced \(stats.coalesced), stale \(stats.stale), revalidated \(stats.revalidated))",
            "evictions    \(stats.evictions)",
            "thumbnails   \(stats.thumbnails) made since start (\(stats.thumbnailsStreamed) decoded while downloading)",
            "in flight    \(stats.fetchesInFlight) fetches, \(stats.waitingRequests) waiting requests, \(stats.openEventStreams) event streams",
        ] + (stats.storeWritable ? [] : ["store        NOT WRITABLE (see /healthz): serving, not storing"])
        print(lines.joined(separator: "\n"))
    }
}

struct Purge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Remove one URL, or everything, from the running daemon's cache.")

    @Argument(help: "The image URL to remove.")
    var url: String?

    @Flag(help: "Remove everything.")
    var all = false

    @Flag(help: "Print the daemon's JSON as it is.")
    var json = false

    @OptionGroup var server: ServerOption

    func validate() throws {
        guard (url != nil) != all else { throw ValidationError("give either a URL or --all") }
    }

    func run() async throws {
        let purged: Int
        do {
            purged = try await DaemonClient(server: server.server).purge(url)
        } catch let error as DaemonError {
            throw ValidationError(error.description)
        }
        if json {
            print("{\"purged\":\(purged)}")
            return
        }
        // Like stats: a line for a person; --json for a script.
        let what = url.map { "\($0) and its variants" } ?? "everything"
        print("purged \(what): \(purged) object\(purged == 1 ? "" : "s") removed")
    }
}
