import Foundation
import Synchronization

/// The origin from `scripts/testorigin.py`, as a child process on an ephemeral port.
package final class TestOrigin: @unchecked Sendable {  // immutable after init; Pipe is not marked Sendable
    package let port: UInt16
    private let process: ChildProcess
    private let stdin: Pipe
    /// Its port once it has stopped, held so that nothing else listens there (see `stop`).
    private let heldPort = Mutex<ClosedPort?>(nil)

    package static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    /// Starts the origin and waits for it to print its port. The wait (a Python start, which
    /// takes seconds when a whole suite starts origins on two cores) runs on a thread of its
    /// own: on the cooperative pool, two of them held both threads and stopped every other
    /// test's continuations for 30 s.
    package init() async throws {
        let python = try await blocking { try Self.python.get() }
        let stdin = Pipe(), stdout = Pipe()
        self.stdin = stdin
        process = try ChildProcess(python, [Self.packageRoot.appendingPathComponent("scripts/testorigin.py").path],
                                   stdin: .descriptor(stdin.fileHandleForReading.fileDescriptor),
                                   stdout: .descriptor(stdout.fileHandleForWriting.fileDescriptor))
        // The child's ends are the child's alone: its exit ends the read below.
        try? stdin.fileHandleForReading.close()
        try? stdout.fileHandleForWriting.close()
        let handle = stdout.fileHandleForReading
        let line = try await blocking {
            var line = [UInt8]()
            while !line.contains(10) {
                let chunk = handle.availableData
                guard !chunk.isEmpty else { throw HTTPTestError(description: "origin exited before printing its port") }
                line += chunk
            }
            return line
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let port = text.split(separator: " ").last.flatMap({ UInt16($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            throw HTTPTestError(description: "origin said \(text)")
        }
        self.port = port
    }

    deinit { stop() }

    /// The interpreter `python3` names, asked once: an origin started through a version
    /// manager's shim (pyenv's is a bash script that runs several more) cost 80 ms more CPU
    /// than the interpreter itself, at nice 0, with a whole suite's origins starting at once.
    private static let python: Result<String, HTTPTestError> = {
        let out = Pipe()
        guard let child = try? ChildProcess("/usr/bin/env", ["python3", "-c", "import sys; print(sys.executable)"],
                                            stdout: .descriptor(out.fileHandleForWriting.fileDescriptor))
        else { return .failure(HTTPTestError(description: "python3 could not be started")) }
        try? out.fileHandleForWriting.close()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        _ = child.waitForExit()
        return text.hasPrefix("/") ? .success(text) : .failure(HTTPTestError(description: "python3 said \(text)"))
    }()

    /// Ends the origin and waits for it to exit, so that nothing answers on its port after this
    /// returns: a test that stops the origin next asks for what only a dead origin gives. The
    /// port stays held (bound, never listening) while this lives, so that a connect to it is
    /// refused: another test's listener took a stopped origin's port once, and the daemon
    /// fetched from that instead.
    package func stop() {
        try? stdin.fileHandleForWriting.close()
        process.stop()
        guard heldPort.withLock({ $0 == nil }) else { return }
        let held = try? ClosedPort(port)
        heldPort.withLock { $0 = $0 ?? held }
    }

    /// The absolute URL of `path` on this origin.
    package func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// `/thumb?url=…` for `path` on this origin.
    package func thumb(_ path: String, _ extra: String = "") -> String {
        "/thumb?url=\(url(path).queryEncoded)\(extra)"
    }

    package struct Stats: Decodable, Sendable {
        package var requests: [String: Int]
        package var aborted: [String: Int]
        package var order: [String]
        /// Conditional requests answered 304, by path.
        package var notModified: [String: Int]
        /// Absolute-form targets: requests that came to this origin as to a proxy.
        package var proxied: [String]
        /// Client connections that counted requests came on.
        package var connections: Int
    }

    package func stats() async throws -> Stats {
        let result = try await request(port, "/__stats")
        return try JSONDecoder().decode(Stats.self, from: Data(result.body))
    }

    package func requests(_ path: String) async throws -> Int { try await stats().requests[path] ?? 0 }
    package func aborted(_ path: String) async throws -> Int { try await stats().aborted[path] ?? 0 }
    package func notModified(_ path: String) async throws -> Int { try await stats().notModified[path] ?? 0 }

    package func release(_ gate: String) async throws {
        _ = try await request(port, "/__release/\(gate)")
    }

    /// The bytes the origin serves for `path`, fetched directly (not counted as a request).
    package func direct(_ path: String) async throws -> [UInt8] {
        try await request(port, path, headers: ["X-Test-Direct": "1"]).body
    }

    /// Stores `body` at `/file/NAME` on this origin (an image a test made).
    package func put(_ name: String, _ body: [UInt8]) async throws {
        let result = try await blocking { [port] in
            let connection = try RawConnection(port: port)
            defer { connection.close() }
            try connection.send("PUT", "/__put/\(name)", headers: ["X-Test-Direct": "1"], body: body)
            return try connection.read()
        }
        guard result.status == 200 else { throw HTTPTestError(description: "PUT \(name): \(result.status)") }
    }
}
