import Foundation
import Testing

/// Rules about the sources that the compiler does not enforce, checked on the files.
@Suite("Source rules")
struct SourceRulesTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Sources")

    static func swiftFiles() throws -> [(name: String, text: String)] {
        let enumerator = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        var files: [(String, String)] = []
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            files.append((url.path.replacingOccurrences(of: sources.path + "/", with: ""), try String(contentsOf: url, encoding: .utf8)))
        }
        return files
    }

    /// A `Mutex` whose value is a closure grows it by two thunks at every `withLock { $0 }`
    /// read (Swift 6.3; see `Support/Slot`): such a value goes in a `Slot`. Closure types
    /// are found written out (`->`) and through the type aliases the sources define.
    @Test("no Mutex holds a closure: it goes in a Slot")
    func noClosureInMutex() throws {
        let files = try Self.swiftFiles()
        #expect(files.count > 50, "the sources were not found at \(Self.sources.path)")
        let alias = try Regex(#"typealias\s+(\w+)\s*=\s*[^\n]*->"#)
        var closureAliases: Set<String> = []
        for file in files {
            for match in file.text.matches(of: alias) {
                if let name = match[1].substring { closureAliases.insert(String(name)) }
            }
        }
        #expect(closureAliases.contains("Sink"), "the type aliases were not read: \(closureAliases.sorted())")
        let mutex = try Regex(#"Mutex<([^\n]*)>\("#)
        var found: [String] = []
        for file in files {
            for match in file.text.matches(of: mutex) {
                guard let inner = match[1].substring else { continue }
                let names = inner.split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init)
                if inner.contains("->") || names.contains(where: closureAliases.contains) {
                    found.append("\(file.name): Mutex<\(inner)")
                }
            }
        }
        #expect(found.isEmpty, "a closure in a Mutex (use Support's Slot): \(found)")
    }
}
