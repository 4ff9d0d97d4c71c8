import Foundation
import Testing
@testable import ThumbdCore

/// What users read about the settings agrees with the code: the shipped file, the README's
/// table, and every example in both.
extension ConfigurationTests {
    @Test("the shipped config/thumbd.yaml states the defaults, every one of them")
    func shippedFile() async throws {
        let file = Self.packageRoot.appendingPathComponent("config/thumbd.yaml").path
        let loaded = try await ThumbdConfiguration.load(file: file, environment: [:])
        // The whole configuration, field by field (a field added later is compared too).
        #expect(String(reflecting: loaded) == String(reflecting: ThumbdConfiguration()))
    }

    /// A default as the README's table or the settings file writes it, in one spelling:
    /// backticks and a parenthesized note dropped, sizes in bytes, "empty" and "none" as "".
    static func normalized(_ text: String) -> String {
        var value = text.replacingOccurrences(of: "`", with: "").trimmingCharacters(in: .whitespaces)
        value = value.replacing(/\s*\(.*\)$/, with: "")
        if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
        if ["empty", "none", "[]", "{}"].contains(value) { return "" }
        if let match = value.wholeMatch(of: /(\d+) (KiB|MiB|GiB)/), let number = Int(match.output.1) {
            let shift = ["KiB": 10, "MiB": 20, "GiB": 30][String(match.output.2)]!
            return String(number << shift)
        }
        return value
    }

    /// The settings table of the README: each key (a row may name two, `a` / `b`) with its default.
    static func readmeDefaults() throws -> (keys: [String: String], rows: Int) {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false)
        let header = try #require(lines.firstIndex { $0.hasPrefix("| key | environment | default |") })
        var keys: [String: String] = [:]
        var rows = 0
        for line in lines[(header + 2)...] {
            guard line.hasPrefix("|") else { break }  // the table ends at its first other line
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 5 else { continue }
            rows += 1
            let names = cells[1].replacingOccurrences(of: "`", with: "").components(separatedBy: " / ")
            let defaults = cells[3].components(separatedBy: " / ")
            let section = names[0].split(separator: ".").first.map(String.init) ?? ""
            for (index, name) in names.enumerated() {
                let key = name.contains(".") ? name : section + "." + name
                keys[key] = normalized(defaults.count == names.count ? defaults[index] : cells[3])
            }
        }
        return (keys, rows)
    }

    /// The settings file's keys with their values; a key shown commented out (`# workers: 2`)
    /// has none (it is set by the machine, or has no default).
    static func fileDefaults() throws -> [String: String?] {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("config/thumbd.yaml"), encoding: .utf8)
        var section = ""
        var keys: [String: String?] = [:]
        for line in text.split(separator: "\n") {
            if let match = line.wholeMatch(of: /([a-z]+):\s*/) {
                section = String(match.output.1)
            } else if let match = line.wholeMatch(of: /\s\s([a-zA-Z]+): (.*)/) {
                keys[section + "." + match.output.1] = normalized(String(match.output.2))
            } else if let match = line.wholeMatch(of: /\s\s# ([a-zA-Z]+): (.*)/),
                      SettingNames.known.contains(section + "." + match.output.1) {
                keys[section + "." + match.output.1] = .some(nil)
            }
        }
        return keys
    }

    @Test("the README's settings table, config/thumbd.yaml and the code name the same settings with the same defaults")
    func settingsAgree() throws {
        let known = Set(SettingNames.known)
        let readme = try Self.readmeDefaults()
        let file = try Self.fileDefaults()
        #expect(known.count > 60, "the settings were not read: \(known.sorted())")
        #expect(Set(readme.keys.keys) == known,
                "in the README's table but no setting: \(Set(readme.keys.keys).subtracting(known).sorted()); missing: \(known.subtracting(readme.keys.keys).sorted())")
        #expect(Set(file.keys) == known,
                "in config/thumbd.yaml but no setting: \(Set(file.keys).subtracting(known).sorted()); missing: \(known.subtracting(file.keys).sorted())")
        for (key, value) in file {
            guard let value, let documented = readme.keys[key] else { continue }
            #expect(documented == value, "\(key): the README says \(documented), config/thumbd.yaml \(value)")
        }
        // The user agent names the release (the file shows it commented out: a copy of the
        // file must not hold an old release's name).
        #expect(ThumbdConfiguration().upstream.userAgent == "thumbd/" + BuildInfo.version)
    }

    @Test("every setting the README and config/thumbd.yaml show as an example loads: THUMBD_ variables and YAML blocks")
    func documentedExamples() async throws {
        let readme = try String(contentsOf: Self.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let config = try String(contentsOf: Self.packageRoot.appendingPathComponent("config/thumbd.yaml"), encoding: .utf8)
        var checked = 0
        for text in [readme, config] {
            for match in text.matches(of: /(THUMBD_[A-Z_]+)=([^\s`)\]]+)/) {
                var (name, value) = (String(match.output.1), String(match.output.2))
                // A shell's single quotes (a JSON value) are not part of it.
                if value.count >= 2, value.hasPrefix("'"), value.hasSuffix("'") { value = String(value.dropFirst().dropLast()) }
                guard !SettingNames.clientVariables.contains(name), !value.hasPrefix("$"), !value.hasPrefix("\"") else { continue }
                do {
                    _ = try await ThumbdConfiguration.load(file: nil, environment: [name: value])
                } catch {
                    Issue.record("the documented \(name)=\(value) does not load: \(error)")
                }
                checked += 1
            }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-readme-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (index, block) in readme.matches(of: /```yaml\n((?:.|\n)*?)```/).enumerated() {
            let file = directory.appendingPathComponent("example-\(index).yaml")
            try String(block.output.1).write(to: file, atomically: true, encoding: .utf8)
            do {
                _ = try await ThumbdConfiguration.load(file: file.path, environment: [:])
            } catch {
                Issue.record("the README's YAML example \(index) does not load: \(error)")
            }
            checked += 1
        }
        #expect(checked >= 3)
    }
}
