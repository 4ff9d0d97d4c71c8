import Foundation
import ThumbdCore

/// Reads a thumbd event stream over a raw socket: response head, then the body (chunked or,
/// as thumbd sends it, delimited by the server closing the connection) fed to
/// `EventStreamParser`, until the server ends the body (or the reader stops early).
final class EventStreamClient: @unchecked Sendable {  // used from one task at a time
    let connection: RawConnection
    private(set) var parser = EventStreamParser()
    private(set) var status = 0
    private(set) var headers: [String: String] = [:]
    private(set) var closedByServer = false

    init(port: UInt16, path: String, lastEventID: String? = nil, receiveBuffer: Int32? = nil) throws {
        connection = try RawConnection(port: port, receiveBuffer: receiveBuffer)
        var headers = ["Accept": "text/event-stream"]
        if let lastEventID { headers["Last-Event-ID"] = lastEventID }
        try connection.send("GET", path, headers: headers)
        let head = try connection.readHead()
        status = head.status
        self.headers = head.headers
    }

    /// Reads until `stop` says so, the body ends, or `seconds` pass.
    func read(seconds: Double = 20, until stop: (EventStreamParser) -> Bool = { _ in false }) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline && !stop(parser) {
            let chunked = headers["transfer-encoding"]?.lowercased() == "chunked"
            guard let chunk = try chunked ? connection.readChunk() : connection.readUntilClose() else {
                closedByServer = true
                return
            }
            parser.feed(chunk)
        }
    }

    func close() { connection.close() }
}

extension RawConnection {
    /// Reads a response head only.
    func readHead() throws -> (status: Int, headers: [String: String]) {
        let result = try read(head: true)
        return (result.status, result.headers)
    }
}
