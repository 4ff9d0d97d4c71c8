import Dispatch
import Foundation
import HTTPServer
import Logging
import Support
import Synchronization
import Testing
import LoopbackClient

/// The server alone, with a handler of the test's own: it knows no product type, so
/// everything it says in its own name comes from the handler (`render`) or its configuration.
@Suite("HTTPServer without the product")
struct HTTPServerTests {
    /// A streamed body: "first", then nothing until it is woken; "bye" as its last words.
    final class Ticker: ResponseStream, @unchecked Sendable {  // mutable state only under `state`
        private let state = Mutex<(sent: Bool, farewell: [UInt8], waker: (any StreamWaker)?)>((false, Array("bye".utf8), nil))

        func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamRead {
            state.withLock { state in
                guard !state.sent else { return .wait }
                state.sent = true
                buffer.copyBytes(from: "first".utf8)
                return .data(5)
            }
        }

        func lastWords(into buffer: UnsafeMutableRawBufferPointer) -> Int {
            state.withLock { state in
                buffer.copyBytes(from: state.farewell)
                defer { state.farewell = [] }
                return state.farewell.count
            }
        }

        func attach(_ waker: any StreamWaker) { state.withLock { $0.waker = waker } }
        func detach() { state.withLock { $0.waker = nil } }
        /// Wakes the connection with nothing new to send.
        func poke() { state.withLock { $0.waker }?.wake() }
    }

    /// Echoes what it was given; `/later` suspends and answers from another thread;
    /// `/stream` streams a `Ticker`.
    final class Echo: HTTPHandler {
        let seen = Mutex<[Request]>([])
        let tickers = Mutex<[Ticker]>([])

        func handle(_ request: Request, context: RequestContext) -> HandlerResult {
            seen.withLock { $0.append(request) }
            if request.path == "/stream" {
                let ticker = Ticker()
                tickers.withLock { $0.append(ticker) }
                return .response(Response(status: 200, headers: [], stream: ticker))
            }
            if request.path == "/loop" {  // which event loop answers: it runs the handler
                return .response(Response(status: 200, headers: [], body: Bytes(Array(ThreadName.current.utf8))))
            }
            if request.path == "/later" {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) {
                    context.respond(Response(status: 202, body: Bytes(Array("later".utf8))))
                }
                return .suspend
            }
            let headers = request.headers.sorted { $0.name < $1.name }.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
            return .response(Response(status: 200, headers: [("Content-Type", "text/plain")], body: Bytes(Array(headers.utf8))))
        }

        func render(_ refusal: ServerRefusal) -> Response {
            Response(status: refusal.status, headers: [("Content-Type", "text/plain")], body: Bytes(Array("refused: \(refusal)".utf8)))
        }
    }

    static func withServer(_ configure: (inout HTTPServer.Configuration) -> Void = { _ in },
                           _ body: (HTTPServer, Echo) async throws -> Void) async throws {
        var configuration = HTTPServer.Configuration(listen: try ListenAddress(parsing: "127.0.0.1:0"))
        configure(&configuration)
        let handler = Echo()
        let server = HTTPServer(configuration: configuration, handler: handler, logger: Logger(label: "test"))
        try server.start()
        defer { server.stop() }
        try await body(server, handler)
    }

    static func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }

    static func eventually(_ condition: @Sendable () -> Bool) async throws -> Bool {
        for _ in 0..<1_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
        return condition()
    }

    static func exchange(_ port: UInt16, _ send: @escaping @Sendable (HTTPConnection) throws -> Void) async throws -> HTTPConnection.Response {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result {
                    let connection = try HTTPConnection(address: .v4(0x7F00_0001), port: port, timeoutSeconds: 10)
                    defer { connection.close() }
                    try send(connection)
                    return try connection.read()
                })
            }
        }
    }

    @Test("only the configured request headers are copied, and Server is the configured one")
    func headers() async throws {
        try await Self.withServer({ $0.requestHeaders = ["host", "x-wanted"]; $0.serverHeader = "echo/1" }) { server, _ in
            let response = try await Self.exchange(server.port) {
                try $0.send("GET", "/h", headers: ["X-Wanted": "yes", "X-Other": "no"])
            }
            #expect(response.status == 200)
            #expect(response.text == "host=127.0.0.1,x-wanted=yes")
            #expect(response[header: "Server"] == "echo/1")
            // Names in any case; the first of a repeated one, as a lookup by name gives it; a
            // name of a wanted one's length that is not it, and a longer one, are not copied.
            let raw = try await Self.exchange(server.port) {
                try $0.sendRaw(Array(("GET /h HTTP/1.1\r\nhOsT: a.example\r\nX-WANTED: first\r\nX-Wantex: no\r\n"
                                      + "x-wanted: second\r\nX-Wanted-Too: no\r\n\r\n").utf8))
            }
            #expect(raw.text == "host=a.example,x-wanted=first")
        }
        try await Self.withServer { server, _ in
            let response = try await Self.exchange(server.port) { try $0.send("GET", "/h") }
            #expect(response[header: "Server"] == nil)
        }
    }

    @Test("a suspended request holds no thread and is answered from another one")
    func suspension() async throws {
        try await Self.withServer { server, _ in
            let response = try await Self.exchange(server.port) { try $0.send("GET", "/later") }
            #expect(response.status == 202)
            #expect(response.text == "later")
            #expect(server.waitUntilIdle(timeout: .seconds(5)))
            #expect(server.suspendedConnections == 0)
        }
    }

    @Test("the server's own refusals are rendered by the handler, with the status the server decides")
    func refusals() async throws {
        try await Self.withServer({ $0.maxBodyBytes = 1024; $0.maxQueryParameters = 4 }) { server, handler in
            let framing = try await Self.exchange(server.port) {
                try $0.sendRaw(Array("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".utf8))
            }
            #expect(framing.status == 400)
            #expect(framing.text.hasPrefix("refused: badFraming"))
            let large = try await Self.exchange(server.port) { try $0.send("POST", "/x", body: [UInt8](repeating: 1, count: 2048)) }
            #expect(large.status == 413)
            #expect(large.text == "refused: bodyTooLarge(limit: 1024)")
            let query = try await Self.exchange(server.port) { try $0.send("GET", "/x?a=1&b=2&c=3&d=4&e=5") }
            #expect(query.status == 414)
            #expect(query.text == "refused: tooManyParameters(limit: 4)")
            #expect(query[header: "Connection"] == "close")
            // `;` separates parameters too, and only after the first `?`; `%00` refuses a
            // path, not a query.
            let semicolons = try await Self.exchange(server.port) { try $0.send("GET", "/x?a=1;b=2?c=3;d=4;e=5&f=6") }
            #expect(semicolons.status == 414)
            let four = try await Self.exchange(server.port) { try $0.send("GET", "/four?a=%00;b=2?c=3&d=4") }
            #expect(four.status == 200)
            let nul = try await Self.exchange(server.port) { try $0.send("GET", "/x%41%00y?a=1") }
            #expect(nul.status == 400)
            #expect(nul.text == "refused: nulInPath")
            let percent = try await Self.exchange(server.port) { try $0.send("GET", "/p%4100%0") }
            #expect(percent.status == 200)
            let noHost = try await Self.exchange(server.port) { try $0.sendRaw(Array("GET /x HTTP/1.1\r\n\r\n".utf8)) }
            #expect(noHost.status == 400)
            #expect(noHost.text == "refused: missingHost")
            // none of the refused reached the handler
            #expect(handler.seen.withLock { $0.map(\.path) } == ["/four", "/pA00%0"])
        }
    }

    @Test("connections go to the event loop with the fewest, so the loops share the clients evenly",
          arguments: [2, 3])
    func balance(threads: Int) async throws {
        try await Self.withServer({ $0.threads = threads }) { server, _ in
            let port = server.port
            /// Opens `count` keep-alive connections, one after another, and asks each which loop it is on.
            func open(_ count: Int) async throws -> [(connection: HTTPConnection, loop: String)] {
                try await Self.blocking {
                    try (0..<count).map { _ in
                        let connection = try HTTPConnection(address: .v4(0x7F00_0001), port: port, timeoutSeconds: 10)
                        try connection.send("GET", "/loop")
                        return (connection, try connection.read().text)
                    }
                }
            }
            let names = (0..<threads).map { "thumbd-http-\($0)" }
            let first = try await open(3 * threads)
            defer { first.forEach { $0.connection.close() } }
            #expect(names.map { name in first.count { $0.loop == name } } == Array(repeating: 3, count: threads))
            #expect(server.connectionsPerLoop == Array(repeating: 3, count: threads))
            // The last loop's clients leave: the next ones go to it, until it has as many again.
            for (connection, loop) in first where loop == names.last { connection.close() }
            #expect(try await Self.eventually { server.connectionsPerLoop.last == 0 })
            let next = try await open(3)
            defer { next.forEach { $0.connection.close() } }
            #expect(next.map(\.loop) == Array(repeating: names.last!, count: 3))
            #expect(server.connectionsPerLoop == Array(repeating: 3, count: threads))
        }
    }

    @Test("stopAccepting refuses new connections with the handler's shutdown answer")
    func shutdown() async throws {
        try await Self.withServer { server, _ in
            server.stopAccepting()
            let response = try await Self.exchange(server.port) { try $0.send("GET", "/h") }
            #expect(response.status == 503)
            #expect(response.text == "refused: shuttingDown")
        }
    }

    @Test("a stream woken after stopAccepting with nothing to send ends after its last words")
    func lastWords() async throws {
        try await Self.withServer { server, handler in
            let connection = try HTTPConnection(address: .v4(0x7F00_0001), port: server.port, timeoutSeconds: 10)
            defer { connection.close() }
            let first = try await Self.blocking {
                try connection.send("GET", "/stream")
                _ = try connection.readHead()
                return try connection.nextChunk()
            }
            #expect(first == Array("first".utf8))
            #expect(try await Self.eventually { server.suspendedConnections == 1 })
            server.stopAccepting()
            // Woken during shutdown with nothing new (a keepalive due, an event for another
            // reader): the server must not end the stream without its last words.
            handler.tickers.withLock { $0 }.forEach { $0.poke() }
            let rest = try await Self.blocking { () -> [[UInt8]] in
                var chunks: [[UInt8]] = []
                while let chunk = try connection.nextChunk() { chunks.append(chunk) }
                return chunks
            }
            #expect(rest == [Array("bye".utf8)])
            #expect(server.waitUntilIdle(timeout: .seconds(5)))
        }
    }

    @Test("a listen address that is not an IP literal, and one in use, are errors of the server's own")
    func listenErrors() throws {
        #expect(throws: HTTPServerError.badListenAddress("example.org:80")) { try ListenAddress(parsing: "example.org:80") }
        #expect(throws: HTTPServerError.badListenAddress("127.0.0.1")) { try ListenAddress(parsing: "127.0.0.1") }
        #expect(try ListenAddress(parsing: "[::1]:8080").ip == IPAddress("::1"))
        #expect(try ListenAddress(parsing: "localhost:8080").host == "127.0.0.1")
        let first = HTTPServer(configuration: .init(listen: try ListenAddress(parsing: "127.0.0.1:0")), handler: Echo(), logger: Logger(label: "test"))
        #expect(first.port == 0)  // built, not bound: a daemon builds its parts before it starts them
        try first.start()
        defer { first.stop() }
        let taken = try ListenAddress(parsing: "127.0.0.1:\(first.port)")
        let second = HTTPServer(configuration: .init(listen: taken), handler: Echo(), logger: Logger(label: "test"))
        #expect {
            try second.start()
        } throws: { error in
            if case HTTPServerError.listenFailed = error { true } else { false }
        }
    }
}
