import Configuration
import Foundation
import Synchronization
import Yams

/// Which setting names exist. A key in the file or a `THUMBD_*` variable that names no
/// setting refuses the start, with the nearest name: a typo (`upstream.maxPerHots`) must not
/// leave the default silently in force.
enum SettingNames {
    /// Every setting's dotted key, as the sections read it: an empty configuration is read
    /// once and every key asked for is recorded. A new setting is known by being read.
    static let known: [String] = {
        let recorder = Recorder()
        _ = try? ThumbdConfiguration(reader: ConfigReader(provider: InMemoryProvider(values: [:]), accessReporter: recorder))
        return recorder.keys.withLock { $0 }.sorted()
    }()

    /// `THUMBD_*` variables that are not settings: read by the client subcommands.
    static let clientVariables = ["THUMBD_URL", "THUMBD_SIGNING_KEY"]

    private final class Recorder: AccessReporter {
        let keys = Mutex<Set<String>>([])
        func report(_ event: AccessEvent) {
            _ = keys.withLock { $0.insert(event.metadata.key.components.joined(separator: ".")) }
        }
    }

    /// The environment variable of a dotted key, as swift-configuration spells it:
    /// `upstream.maxPerHost` → `THUMBD_UPSTREAM_MAX_PER_HOST`.
    static func variable(_ key: String) -> String {
        "THUMBD_" + key.split(separator: ".").map { component in
            var out = ""
            var previous: Character?
            for char in component {
                if let previous, previous.isLowercase, char.isUppercase { out.append("_") }
                out.append(char)
                previous = char
            }
            return out.uppercased()
        }.joined(separator: "_")
    }

    /// Refuses a `THUMBD_` variable that is no setting's but a near miss of one (within
    /// `nearMiss` edits: a typo that would leave the default silently in force); returns the
    /// others, which are someone else's and are ignored. Kubernetes gives every pod of a
    /// namespace with a Service named `thumbd` `THUMBD_PORT=tcp://…`, `THUMBD_SERVICE_HOST`,
    /// `THUMBD_PORT_8080_TCP_ADDR` and the like; a script may export its own `THUMBD_CMD`.
    static func checkEnvironment(_ environment: [String: String]) throws(ConfigurationError) -> [String] {
        let variables = known.map(variable)
        var ignored: [String] = []
        for name in environment.keys.sorted() where name.hasPrefix("THUMBD_") {
            guard !variables.contains(name), !clientVariables.contains(name) else { continue }
            let near = variables.map { ($0, ParameterNames.distance(name, $0)) }.filter { $1 <= nearMiss }
                .min { ($0.1, $0.0) < ($1.1, $1.0) }?.0
            guard let near else {
                ignored.append(name)
                continue
            }
            throw ConfigurationError(
                key: name, reason: "no setting has this variable (did you mean \(near)?); each setting's variable is "
                    + "THUMBD_ and its key in capitals, as THUMBD_UPSTREAM_MAX_PER_HOST for upstream.maxPerHost")
        }
        return ignored
    }

    /// The edits within which an unknown variable is taken for a misspelt setting.
    static let nearMiss = 3

    /// Refuses a key of the settings file that is no setting's.
    /// Returns the parsed file (nil when empty).
    @discardableResult
    static func checkFile(_ text: String, path: String) throws(ConfigurationError) -> [String: Any]? {
        let parsed: Any?
        do {
            parsed = path.hasSuffix(".json") ? try JSONSerialization.jsonObject(with: Data(text.utf8)) : try Yams.load(yaml: text)
        } catch {
            throw ConfigurationError(key: "--config", reason: "\(path) cannot be parsed: \(error)")
        }
        guard let parsed else { return nil }  // an empty file
        guard let root = parsed as? [String: Any] else {
            throw ConfigurationError(key: "--config", reason: "\(path) must hold a mapping of sections (server:, store:, …)")
        }
        for key in flatten(root).sorted() where !known.contains(key) {
            let hint = ParameterNames.suggestion(for: key, among: known).map { " (did you mean \($0)?)" } ?? ""
            throw ConfigurationError(key: key, reason: "\(path) sets \(key), which is not a setting\(hint)")
        }
        return root
    }

    /// Settings whose value is a whole mapping, not a section of settings.
    static let mappings: Set<String> = ["thumbnails.presets"]

    /// The dotted keys of a nested mapping's leaves (a list is a leaf).
    private static func flatten(_ mapping: [String: Any], prefix: String = "") -> [String] {
        mapping.flatMap { name, value -> [String] in
            let key = prefix.isEmpty ? name : prefix + "." + name
            if let inner = value as? [String: Any], !mappings.contains(key) { return flatten(inner, prefix: key) }
            return [key]
        }
    }
}
