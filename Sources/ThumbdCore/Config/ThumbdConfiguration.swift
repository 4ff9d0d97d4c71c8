import Configuration
import Foundation
import SystemPackage

/// Every setting of the daemon. Sources, later wins: the YAML file (`config/thumbd.yaml`),
/// then `THUMBD_*` environment variables (`THUMBD_UPSTREAM_MAX_PER_HOST` for
/// `upstream.maxPerHost`), then command-line flags.
package struct ThumbdConfiguration: Sendable {
    package var server = ServerConfiguration()
    package var store = StoreConfiguration()
    package var upstream = UpstreamConfiguration()
    package var batches = BatchConfiguration()
    package var thumbnails = ThumbnailConfiguration()
    package var metrics = MetricsConfiguration()
    package var log = LogConfiguration()
    package var signing = SigningConfiguration()
    /// `THUMBD_*` variables that name no setting and are no near miss of one: someone
    /// else's (Kubernetes's service variables), ignored and logged at start.
    package var ignoredVariables: [String] = []

    package init() {}

    package init(reader: ConfigReader) throws {
        server = try ServerConfiguration(reader: reader)
        store = try StoreConfiguration(reader: reader)
        upstream = try UpstreamConfiguration(reader: reader)
        batches = try BatchConfiguration(reader: reader)
        thumbnails = try ThumbnailConfiguration(reader: reader)
        metrics = try MetricsConfiguration(reader: reader)
        log = try LogConfiguration(reader: reader)
        signing = try SigningConfiguration(reader: reader)
    }

    /// Where `thumbd serve` looks for a settings file when `--config` is not given, in order:
    /// the working directory's (a checkout, `scripts/run`), then the system's (a package,
    /// the systemd unit, the container).
    package static let defaultFiles = ["config/thumbd.yaml", "/etc/thumbd/thumbd.yaml"]

    /// The first of `defaultFiles` that exists, or nil (the built-in defaults).
    package static func defaultFile(exists: (String) -> Bool = { FileManager.default.fileExists(atPath: $0) }) -> String? {
        defaultFiles.first(where: exists)
    }

    /// Loads the file (if any), the environment and the flag overrides, in that order of
    /// increasing precedence. `overrides` maps dotted keys (`server.listen`) to values.
    package static func load(
        file: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment,
        overrides: [String: String] = [:]
    ) async throws -> ThumbdConfiguration {
        let ignored = try SettingNames.checkEnvironment(environment)
        var providers: [any ConfigProvider] = []
        if !overrides.isEmpty {
            var values: [AbsoluteConfigKey: ConfigValue] = [:]
            for (key, value) in overrides {
                values[AbsoluteConfigKey(key.split(separator: ".").map(String.init))] =
                    ConfigValue(.string(value), isSecret: false)
            }
            providers.append(InMemoryProvider(name: "flags", values: values))
        }
        providers.append(
            EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: "thumbd"))
        if let file {
            guard FileManager.default.fileExists(atPath: file) else {
                throw ConfigurationError(key: "--config", reason: "no such file: \(file)")
            }
            guard let contents = FileManager.default.contents(atPath: file) else {
                throw ConfigurationError(key: "--config", reason: "\(file) cannot be read")
            }
            let root = try SettingNames.checkFile(String(decoding: contents, as: UTF8.self), path: file)
            // A mapping-valued setting (thumbnails.presets) reaches its reader as JSON text,
            // as it does from the environment; the file provider only knows leaves.
            for key in SettingNames.mappings.sorted() {
                let path = key.split(separator: ".").map(String.init)
                var node: Any? = root
                for component in path { node = (node as? [String: Any])?[component] }
                guard let mapping = node as? [String: Any],
                      let json = try? JSONSerialization.data(withJSONObject: mapping) else { continue }
                providers.append(InMemoryProvider(name: "file mappings", values: [
                    AbsoluteConfigKey(path): ConfigValue(.string(String(decoding: json, as: UTF8.self)), isSecret: false),
                ]))
            }
            if root == nil {
                // An empty file (or only comments) sets nothing; the YAML reader refuses one.
            } else if file.hasSuffix(".json") {
                providers.append(try await FileProvider<JSONSnapshot>(filePath: FilePath(file)))
            } else {
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: FilePath(file)))
            }
        }
        var configuration = try ThumbdConfiguration(reader: ConfigReader(providers: providers))
        configuration.ignoredVariables = ignored
        return configuration
    }
}
