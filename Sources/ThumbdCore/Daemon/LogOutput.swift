import Foundation
import Logging
import Synchronization

/// Where the daemon's log lines go: standard error, or `log.file` (appended, and reopened on
/// SIGHUP so that logrotate can move it), as text or as JSON lines (`log.format`).
package final class LogOutput: Sendable {
    package enum Format: String, Sendable, CaseIterable {
        case text, json
    }

    private let format: Format
    private let path: String?
    /// `log.level`, read by every handler on every line, so that a reload changes it for all
    /// (an index into `Logger.Level.allCases`).
    private let threshold = Atomic<Int>(Logger.Level.allCases.firstIndex(of: .info)!)
    /// The file's descriptor (2 for standard error); replaced on reopen under the lock, so a
    /// line is never written half to the old file.
    private let descriptor: Mutex<Int32>

    package init(format: Format, path: String?) throws(ConfigurationError) {
        self.format = format
        self.path = path
        if let path {
            let fd = Self.open(path)
            guard fd >= 0 else {
                throw ConfigurationError(key: "log.file", reason: "\(path) cannot be opened for appending: \(String(cString: strerror(errno)))")
            }
            descriptor = Mutex(fd)
        } else {
            descriptor = Mutex(2)
        }
    }

    deinit {
        let fd = descriptor.withLock { $0 }
        if fd > 2 { close(fd) }
    }

    private static func open(_ path: String) -> Int32 {
        Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
    }

    /// Opens `log.file` again (after logrotate moved it). Nothing to do on standard error.
    /// Returns an error's text when the file cannot be opened; the old one is kept then.
    @discardableResult
    package func reopen() -> String? {
        guard let path else { return nil }
        let fd = Self.open(path)
        guard fd >= 0 else { return "\(path): \(String(cString: strerror(errno)))" }
        let old = descriptor.withLock { current in
            defer { current = fd }
            return current
        }
        if old > 2 { close(old) }
        return nil
    }

    func write(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        descriptor.withLock { fd in
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// The level every handler of this output writes from, unless a logger set its own.
    package var level: Logger.Level {
        get { Logger.Level.allCases[threshold.load(ordering: .relaxed)] }
        set { threshold.store(Logger.Level.allCases.firstIndex(of: newValue)!, ordering: .relaxed) }
    }

    /// A swift-log handler that writes here, from `level`.
    package func handler(label: String) -> any LogHandler {
        Handler(output: self, label: label)
    }

    struct Handler: LogHandler {
        let output: LogOutput
        let label: String
        /// A level a logger set for itself (`logger.logLevel = …`); else the output's.
        private var own: Logger.Level?
        var metadata: Logger.Metadata = [:]

        init(output: LogOutput, label: String) {
            self.output = output
            self.label = label
        }

        var logLevel: Logger.Level {
            get { own ?? output.level }
            set { own = newValue }
        }

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            var all = metadata
            if let more = event.metadata { all.merge(more) { $1 } }
            let time = Self.timestamp()
            switch output.format {
            case .text:
                let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
                output.write("\(time) \(event.level) \(label):\(fields.isEmpty ? "" : " " + fields) \(event.message)")
            case .json:
                var object: [String: Any] = ["time": time, "level": "\(event.level)", "label": label, "message": "\(event.message)"]
                for (key, value) in all where object[key] == nil { object[key] = Self.json(value) }
                guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
                else { return }
                output.write(String(decoding: data, as: UTF8.self))
            }
        }

        private static func json(_ value: Logger.MetadataValue) -> Any {
            switch value {
            case .string(let text): text
            case .stringConvertible(let convertible): convertible.description
            case .array(let values): values.map(json)
            case .dictionary(let values): values.mapValues(json)
            }
        }

        /// RFC 3339 with milliseconds, UTC.
        private static func timestamp() -> String {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            var parts = tm()
            var seconds = now.tv_sec
            gmtime_r(&seconds, &parts)
            return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                          Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), now.tv_nsec / 1_000_000)
        }
    }
}
