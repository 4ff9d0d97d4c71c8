import ArgumentParser
import Dispatch
import Foundation
import Logging
import Support
import ThumbdClient
import ThumbdCore

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
