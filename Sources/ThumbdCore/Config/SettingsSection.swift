import Configuration
import Foundation

/// Reads one section's keys strictly. swift-configuration's `int(forKey:default:)` falls back
/// to the default when a value is present but malformed (`THUMBD_SERVER_THREADS=two`); a
/// daemon must refuse to start instead, naming the key.
struct SettingsSection {
    let reader: ConfigReader
    let name: String

    init(_ reader: ConfigReader, _ name: String) {
        self.reader = reader.scoped(to: ConfigKey(name))
        self.name = name
    }

    private func malformed(_ key: String, _ expected: String) throws -> Never {
        let raw = reader.string(forKey: ConfigKey(key)) ?? "?"
        throw ConfigurationError(key: "\(name).\(key)", reason: "expected \(expected), got \(raw)")
    }

    private func present(_ key: String) -> Bool {
        reader.string(forKey: ConfigKey(key)) != nil
    }

    func int(_ key: String, _ fallback: Int) throws -> Int {
        if let value = reader.int(forKey: ConfigKey(key)) { return value }
        if present(key) { try malformed(key, "an integer") }
        return fallback
    }

    func double(_ key: String, _ fallback: Double) throws -> Double {
        if let value = reader.double(forKey: ConfigKey(key)) { return value }
        if let value = reader.int(forKey: ConfigKey(key)) { return Double(value) }
        if present(key) { try malformed(key, "a number") }
        return fallback
    }

    func bool(_ key: String, _ fallback: Bool) throws -> Bool {
        if let value = reader.bool(forKey: ConfigKey(key)) { return value }
        if present(key) { try malformed(key, "true or false") }
        return fallback
    }

    func string(_ key: String, _ fallback: String) -> String {
        reader.string(forKey: ConfigKey(key)) ?? fallback
    }

    /// Nil when absent or empty.
    func optionalString(_ key: String) -> String? {
        reader.string(forKey: ConfigKey(key)).flatMap { $0.isEmpty ? nil : $0 }
    }

    func strings(_ key: String, _ fallback: [String]) -> [String] {
        if let list = reader.stringArray(forKey: ConfigKey(key)) { return list.filter { !$0.isEmpty } }
        if let one = reader.string(forKey: ConfigKey(key)) {  // "a,b" from the environment
            return one.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        return fallback
    }
}
