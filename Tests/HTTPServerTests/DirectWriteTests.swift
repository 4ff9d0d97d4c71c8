import Dispatch
import Foundation
import HTTPServer
import Logging
import Support
import Synchronization
import Testing
import LoopbackClient

/// A suspended stream's writes: producers on threads of their own wake it, and its
/// connection's event loop, the socket's one writer, reads and sends: no wake may be lost,
/// nothing sent twice or out of order, and no producer's thread may write.
@Suite("HTTPServer: a suspended stream written directly")
struct DirectWriteTests {
    /// Lines appended by producers, each followed by a wake from the producer's own thread:
    /// wakes race one another. Records the threads that read it (where the socket is written).
    final class Lines: ResponseStream, @unchecked Sendable {  // mutable state only under `state`
        private struct State {
            var queued: [UInt8] = []
            var finished = false
            var waker: (any StreamWaker)?
            var readers: Set<String> = []
        }
        private let state = Mutex(State())

        func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamRead {
            let thread = Thread.current.name ?? "unnamed"
            return state.withLock { state in
                state.readers.insert(thread)
                if state.queued.isEmpty { return state.finished ? .end : .wait }
                let count = min(buffer.count, state.queued.count)
                state.queued.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
                state.queued.removeFirst(count)
                return .data(count)
            }
        }

        func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int { 0 }
        func attach(_ waker: any StreamWaker) { state.withLock { $0.waker = waker } }
        func detach() { state.withLock { $0.waker = nil } }

        func append(_ line: String) {
            state.withLock { state in
                state.queued += Array(line.utf8)
                return state.waker
            }?.wake()
        }

        func finish() {
            state.withLock { state in
                state.finished = true
                return state.waker
            }?.wake()
        }

        var attached: Bool { state.withLock { $0.waker != nil } }
        var readers: Set<String> { state.withLock { $0.readers } }
    }

    final class Handler: HTTPHandler {
        let stream = Lines()
        func handle(_ request: Request, context: RequestContext) -> HandlerResult {
            .response(Response(status: 200, headers: [], stream: stream))
        }
        func render(_ refusal: ServerRefusal) -> Response { Response(status: refusal.status) }
    }

    @Test("two producers waking one stream at once: every line arrives once, each producer's in order, all written by the connection's event loop")
    func racingWakes() async throws {
        let handler = Handler()
        let server = HTTPServer(configuration: .init(listen: try ListenAddress(parsing: "127.0.0.1:0")), handler: handler,
                                logger: Logger(label: "test"))
        try server.start()
        defer { server.stop() }
        let connection = try HTTPConnection(address: .v4(0x7F00_0001), port: server.port, timeoutSeconds: 10)
        defer { connection.close() }
        let perProducer = 10_000
        let received = try await HTTPServerTests.blocking { () -> String in
            try connection.send("GET", "/lines")
            _ = try connection.readHead()
            // The stream waits for its first line, suspended and watched: from then on the
            // producers' wakes write to the socket themselves.
            for _ in 0..<1_000 where !handler.stream.attached || server.suspendedConnections == 0 {
                Thread.sleep(forTimeInterval: 0.01)
            }
            for producer in 0..<2 {
                Thread.detachNewThread {
                    for n in 0..<perProducer { handler.stream.append("\(producer):\(n)\n") }
                }
            }
            // Every line must come with the wakes the producers made: a wake lost while
            // another was sending would leave the last lines queued, and this read would
            // run into the connection's timeout. Only then does the stream end.
            var text = [UInt8]()
            var newlines = 0
            while newlines < 2 * perProducer, let chunk = try connection.nextChunk() {
                text += chunk
                newlines += chunk.count { $0 == UInt8(ascii: "\n") }
            }
            handler.stream.finish()
            while let chunk = try connection.nextChunk() { text += chunk }
            return String(decoding: text, as: UTF8.self)
        }
        let lines = received.split(separator: "\n")
        #expect(lines.count == 2 * perProducer)
        for producer in 0..<2 {
            let own = lines.filter { $0.hasPrefix("\(producer):") }.map { Int($0.dropFirst(2))! }
            #expect(own == Array(0..<perProducer))
        }
        // Before, each producer's wake wrote the socket on the producer's own thread.
        let readers = handler.stream.readers
        #expect(readers.count == 1 && readers.allSatisfy { $0.hasPrefix("thumbd-http-") }, "read on \(readers)")
        #expect(server.waitUntilIdle(timeout: .seconds(10)))
    }
}
