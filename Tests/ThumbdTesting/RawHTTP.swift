import Foundation
import Support
import LoopbackClient

/// The tests' HTTP client is the command-line tools' own (`HTTPConnection`, in
/// ThumbdClient): one hand-written client in the package, not two.
package typealias RawConnection = HTTPConnection
package typealias HTTPResult = HTTPConnection.Response

extension HTTPConnection {
    /// A connection to 127.0.0.1:`port`.
    package convenience init(port: UInt16, timeoutSeconds: Int = 20, receiveBuffer: Int32? = nil) throws {
        try self.init(address: .v4(0x7F00_0001), port: port, timeoutSeconds: timeoutSeconds, receiveBuffer: receiveBuffer)
    }

}

extension HTTPConnection.Response {
    package var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:]
    }

    /// The JSON error code of a thumbd error body.
    package var errorCode: String? {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["error"] as? String
    }
}

package struct HTTPTestError: Error, CustomStringConvertible {
    package var description: String
    package init(description: String) { self.description = description }
}

/// One request on a fresh connection, off the cooperative pool (the socket calls block).
package func request(_ port: UInt16, _ target: String, method: String = "GET", headers: [String: String] = [:],
             body: String = "", bodyBytes: [UInt8]? = nil) async throws -> HTTPResult {
    try await timedRequest(port, target, method: method, headers: headers, body: body, bodyBytes: bodyBytes).result
}

/// `request`, with how long the daemon took to answer, timed in the thread that waits for the
/// answer. A time taken around `await request(…)` also counts the wait for a thread of the
/// cooperative pool to resume on, which the suite's other tests hold for seconds on two cores.
package func timedRequest(_ port: UInt16, _ target: String, method: String = "GET", headers: [String: String] = [:],
                          body: String = "", bodyBytes: [UInt8]? = nil) async throws -> (result: HTTPResult, took: Duration) {
    try await blocking {
        let started = ContinuousClock.now
        let connection = try RawConnection(port: port)
        defer { connection.close() }
        try connection.send(method, target, headers: headers, body: bodyBytes ?? Array(body.utf8))
        let result = try connection.read(head: method == "HEAD")
        return (result, ContinuousClock.now - started)
    }
}

package func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    // A thread of its own: a global queue runs about as many items at once as there are
    // cores, so the suite's blocking reads, all at once on two cores, waited for each other
    // there (a hostile-origin row took 23 s of which most was queueing).
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}

/// Polls `condition` every 10 ms until it holds or `seconds` pass. Conditions hold within
/// milliseconds on an idle machine; the bound is generous because the suite runs all its
/// tests at once on two shared cores.
package func eventually(_ seconds: Double = 30, _ condition: @Sendable () async throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}

extension String {
    /// Percent-encodes a whole URL for use as a query value.
    package var queryEncoded: String {
        addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~")))!
    }
}

/// The header `POST /batches` needs.
package let json = ["Content-Type": "application/json"]
