import Foundation
import LoopbackClient
import EventStream

/// Reads a thumbd event stream over a raw socket: response head, then the body (chunked or,
/// as thumbd sends it, delimited by the server closing the connection) fed to
/// `EventStreamParser`, until the server ends the body (or the reader stops early).
package final class EventStreamClient: @unchecked Sendable {  // used from one task at a time
    package let connection: RawConnection
    package private(set) var parser = EventStreamParser()
    package private(set) var status = 0
    package private(set) var headers: [String: String] = [:]
    package private(set) var closedByServer = false

    package init(port: UInt16, path: String, lastEventID: String? = nil, receiveBuffer: Int32? = nil) throws {
        connection = try RawConnection(port: port, receiveBuffer: receiveBuffer)
        var headers = ["Accept": "text/event-stream"]
        if let lastEventID { headers["Last-Event-ID"] = lastEventID }
        try connection.send("GET", path, headers: headers)
        let head = try connection.readHead()
        status = head.status
        self.headers = head.headers
    }

    /// Reads until `stop` says so, the body ends, or `seconds` pass.
    package func read(seconds: Double = 20, until stop: (EventStreamParser) -> Bool = { _ in false }) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline && !stop(parser) {
            guard let chunk = try connection.nextChunk() else {
                closedByServer = true
                return
            }
            parser.feed(chunk)
        }
    }

    package func close() { connection.close() }
}


