import ArgumentParser
import Foundation
import ThumbdClient
import ThumbdCore

/// `thumbd check`: validates the settings as `thumbd serve` would load them, like `nginx -t`.
struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the settings serve would load (the file, then THUMBD_* variables), then exit.",
        discussion: "Exit status: 0 when they load, 78 when one is wrong (the message names it).")

    @Option(help: "A YAML or JSON settings file (default: the one serve would load).")
    var config: String?

    func run() async throws {
        let (file, settings) = try await Self.load(config)
        print("thumbd: the settings load: \(file ?? "no file, the built-in defaults") and the environment")
        if !settings.ignoredVariables.isEmpty {
            print("thumbd: ignored (no setting's): \(settings.ignoredVariables.joined(separator: ", "))")
        }
    }

    /// The settings `serve` would load with `--config config`; a wrong one exits 78.
    static func load(_ config: String?) async throws -> (file: String?, settings: ThumbdConfiguration) {
        let file = config ?? ThumbdConfiguration.defaultFile()
        do {
            return (file, try await ThumbdConfiguration.load(file: file))
        } catch let error as ConfigurationError {
            throw Failure(error.description, exitCode: 78)
        }
    }
}

/// `thumbd health`: asks the daemon the settings describe for `/healthz` (a container's
/// health check, which then follows `server.listen` wherever it is set).
struct Health: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask the daemon at server.listen for /healthz.",
        discussion: "Exit status: 0 when it answers 200 (ok or degraded), 1 otherwise; 78 when the settings are wrong.")

    @Option(help: "A YAML or JSON settings file (default: the one serve would load).")
    var config: String?

    func run() async throws {
        let settings = try await Check.load(config).settings
        let base = "http://" + Self.reachable(settings.server.listen)
        do {
            let (status, body) = try await DaemonClient(server: base, timeout: .seconds(3)).health()
            print("thumbd: \(base)/healthz: \(status) \(body.trimmingCharacters(in: .whitespacesAndNewlines))")
            guard status == 200 else { throw Failure("unhealthy", exitCode: 1) }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure("\(base)/healthz: \(error)", exitCode: 1)
        }
    }

    /// The address a listener on `listen` is reached at from this machine: a wildcard
    /// (`0.0.0.0`, `[::]`, empty) through loopback.
    static func reachable(_ listen: String) -> String {
        guard let colon = listen.lastIndex(of: ":") else { return listen }
        let host = String(listen[..<colon]), port = listen[listen.index(after: colon)...]
        switch host {
        case "", "0.0.0.0", "*": return "127.0.0.1:\(port)"
        case "[::]", "::": return "[::1]:\(port)"
        default: return "\(host):\(port)"
        }
    }
}
