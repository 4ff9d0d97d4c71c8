internal import CMicroHTTPD
import Glibc
import Support
import Synchronization

/// The limits libmicrohttpd 0.9.75 does not enforce by itself, kept per connection (by
/// socket) from MHD's connection notifications:
///
/// - **Deadlines.** MHD's timeout is an idle timeout: a client that trickles a byte a second
///   never reaches it. Here a connection waiting for a request line is closed after
///   `idleTimeout` whatever it sends, and a request must arrive whole (headers and body)
///   within `requestTimeout` of its request line. While a request is processed (waiting for
///   a fetch, streaming events) there is no deadline.
/// - **The connection limit.** At MHD's own limit new clients would wait in the kernel
///   backlog with no answer; MHD is given some headroom, and past `maxConnections` a new
///   connection gets a 503 and a close at once.
/// - **Query parameters.** Each one takes a record in MHD's per-connection pool; past what
///   the pool holds MHD cannot even build its error response and the client hangs. The
///   request line is seen before they are parsed, and too many get a 414 and a close.
///
/// Refusing writes a fixed answer and shuts the socket down (`thumbd_refuse_connection`);
/// MHD then closes the connection through its own path. Each event loop has a table of its
/// own, and everything here for a connection runs on its loop's thread: MHD's notifications,
/// and the deadlines, which the loop has looked at every 250 ms (`reap`). So the loop stays
/// the socket's one writer, and a socket number is never acted on after MHD closed it and
/// the kernel gave the number to another connection: that too would happen on this thread.
/// A refusal is written after the table's lock is released.
final class ConnectionGuard: Sendable {
    struct Limits: Sendable {
        var maxConnections: Int
        var idleTimeout: Duration
        var requestTimeout: Duration
        var maxQueryParameters: Int
    }

    /// Headroom given to MHD above `maxConnections`, so that it keeps accepting and this
    /// guard can answer the excess.
    static let headroom = 64

    /// `refused`: answered and shut down by this guard; kept until MHD's close notification
    /// so that a request MHD still dispatches on it never reaches the handler.
    private enum Phase: UInt64 { case awaiting, receiving, processing, refused }
    private struct Entry {
        var phase: Phase
        /// When it entered `phase`, on the coarse clock (`Self.now`).
        var since: Int64
    }

    /// The entries by socket number. The kernel hands out the lowest free number, so the
    /// numbers stay near the count of open files, and an array indexed by them finds an
    /// entry without hashing: every request looks here three times. Each entry is one word
    /// (every open connection has one, 10,000 event streams included): the time with the
    /// phase in its two low bits (the coarse clock ticks in milliseconds), 0 for none.
    private struct Table {
        private var slots: [UInt64] = []
        private(set) var count = 0

        var indices: Range<Int> { slots.indices }

        subscript(fd: Int32) -> Entry? {
            get { fd >= 0 && Int(fd) < slots.count ? Self.unpack(slots[Int(fd)]) : nil }
            set {
                guard fd >= 0 else { return }
                let index = Int(fd)
                if index >= slots.count {
                    guard newValue != nil else { return }
                    slots.append(contentsOf: repeatElement(0, count: max(index + 1, 2 * slots.count) - slots.count))
                }
                let packed = newValue.map(Self.pack) ?? 0
                count += (packed != 0 ? 1 : 0) - (slots[index] != 0 ? 1 : 0)
                slots[index] = packed
            }
        }

        private static func pack(_ entry: Entry) -> UInt64 {
            UInt64(max(entry.since, 4)) & ~3 | entry.phase.rawValue
        }

        private static func unpack(_ word: UInt64) -> Entry? {
            guard word != 0, let phase = Phase(rawValue: word & 3) else { return nil }
            return Entry(phase: phase, since: Int64(word & ~3))
        }
    }

    /// One loop's table (a Mutex cannot sit in an array by itself).
    private final class Entries: Sendable {
        let table = Mutex(Table())
    }

    /// Nanoseconds on the monotonic clock as the kernel's tick last set it (a few ms old at
    /// most): the deadlines here are seconds, and this is read twice a request.
    private static var now: Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    let limits: Limits
    private let canned: Canned
    /// Each event loop's connections.
    private let tables: [Entries]
    /// The connections of every loop (the limit is the server's).
    private let open = Atomic<Int>(0)
    private let refusedCount = Atomic<Int>(0)
    private let shuttingDown = Atomic<Bool>(false)

    /// The id each refusal carries as `X-Request-Id` (`HTTPHandler.refusalID`).
    private let refusalID: @Sendable () -> String?

    init(limits: Limits, loops: Int, render: (ServerRefusal) -> Response, refusalID: @escaping @Sendable () -> String?) {
        self.limits = limits
        self.canned = Canned(limits: limits, render: render)
        self.refusalID = refusalID
        tables = (0..<loops).map { _ in Entries() }
    }

    /// Changes loop `loop`'s table, keeping the count of every loop's connections.
    private func update<T>(_ loop: Int, _ body: (inout Table) -> T) -> T {
        let (result, change) = tables[loop].table.withLock { table -> (T, Int) in
            let before = table.count
            let result = body(&table)
            return (result, table.count - before)
        }
        if change != 0 { open.add(change, ordering: .relaxed) }
        return result
    }

    /// Connections refused or closed by this guard since start.
    var refused: Int { refusedCount.load(ordering: .relaxed) }

    // MARK: MHD notifications (on the connection's event loop)

    /// Shutdown: from now on every new connection gets 503 shutting_down and a close.
    func refuseNewConnections() { shuttingDown.store(true, ordering: .sequentiallyConsistent) }

    func started(_ fd: Int32, loop: Int) {
        let refusal: CannedAnswer? = if shuttingDown.load(ordering: .sequentiallyConsistent) {
            canned.shuttingDown
        } else if open.load(ordering: .relaxed) >= limits.maxConnections {
            canned.tooManyConnections
        } else {
            nil
        }
        if let refusal {
            refuse(fd, refusal)
            return
        }
        update(loop) { $0[fd] = Entry(phase: .awaiting, since: Self.now) }
    }

    func closed(_ fd: Int32, loop: Int) {
        update(loop) { $0[fd] = nil }
    }

    /// A request line arrived; its query is not parsed yet.
    func requestLine(_ fd: Int32, loop: Int, uri: UnsafePointer<CChar>) {
        let (parameters, nul) = Self.scan(UnsafeRawBufferPointer(start: uri, count: strlen(uri)))
        let refused = update(loop) { entries -> Bool in
            guard let entry = entries[fd], entry.phase != .refused else { return false }
            let refused = parameters > limits.maxQueryParameters || nul
            entries[fd] = Entry(phase: refused ? .refused : .receiving, since: Self.now)
            return refused
        }
        if refused { refuse(fd, nul ? canned.nulInPath : canned.tooManyParameters) }
    }

    /// A request target's query parameters (1 + its `&` and `;` after the first `?`), and
    /// whether its path holds `%00`: MHD decodes that in place, and the path would end there
    /// (`/%00x` is `/`). Searched with `memchr`: a walk testing each byte for all three was
    /// 2% of a hot hit's instructions.
    static func scan(_ target: UnsafeRawBufferPointer) -> (parameters: Int, nulInPath: Bool) {
        guard let base = target.baseAddress, !target.isEmpty else { return (0, false) }
        let question = memchr(base, Int32(UInt8(ascii: "?")), target.count).map { $0 - UnsafeMutableRawPointer(mutating: base) }
        let pathEnd = question ?? target.count
        var nul = false
        var from = 0
        while from < pathEnd, let percent = memchr(base + from, Int32(UInt8(ascii: "%")), pathEnd - from) {
            let at = percent - UnsafeMutableRawPointer(mutating: base)
            if at + 2 < target.count, target[at + 1] == UInt8(ascii: "0"), target[at + 2] == UInt8(ascii: "0") {
                nul = true
                break
            }
            from = at + 1
        }
        guard let question else { return (0, nul) }
        let query = UnsafeRawBufferPointer(rebasing: target[(question + 1)...])
        return (1 + count(UInt8(ascii: "&"), in: query) + count(UInt8(ascii: ";"), in: query), nul)
    }

    /// How many times `byte` occurs in `bytes`, found by `memchr`.
    private static func count(_ byte: UInt8, in bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var count = 0
        var from = 0
        while from < bytes.count, let hit = memchr(base + from, Int32(byte), bytes.count - from) {
            count += 1
            from = hit - UnsafeMutableRawPointer(mutating: base) + 1
        }
        return count
    }

    /// The request is complete and goes to its handler: no deadline until it is answered.
    /// Returns false when this guard refused the connection already: the request is dropped.
    func processing(_ fd: Int32, loop: Int) -> Bool {
        update(loop) { entries in
            guard let entry = entries[fd] else { return true }
            if entry.phase == .refused { return false }
            entries[fd]!.phase = .processing
            return true
        }
    }

    /// The response was sent: the connection waits for the next request.
    func completed(_ fd: Int32, loop: Int) {
        update(loop) { entries in
            if let entry = entries[fd], entry.phase != .refused { entries[fd] = Entry(phase: .awaiting, since: Self.now) }
        }
    }

    // MARK: Deadlines

    /// Closes loop `loop`'s connections past their deadline: a 408 to one whose request did
    /// not arrive whole in time, nothing to one idle too long. Run by that loop.
    func reap(loop: Int) {
        let now = Self.now
        let idle = limits.idleTimeout.nanoseconds, request = limits.requestTimeout.nanoseconds
        let expired = update(loop) { entries -> [(fd: Int32, answered: Bool)] in
            var expired: [(fd: Int32, answered: Bool)] = []
            for index in entries.indices {
                guard let entry = entries[Int32(index)] else { continue }
                let past = switch entry.phase {
                case .awaiting: now - entry.since > idle
                case .receiving: now - entry.since > request
                case .processing, .refused: false
                }
                guard past else { continue }
                expired.append((Int32(index), entry.phase == .receiving))
                entries[Int32(index)] = nil
            }
            return expired
        }
        for (fd, answered) in expired {
            if answered { refuse(fd, canned.requestTimeout) } else { close(fd) }
        }
    }

    /// Writes `answer` (with an id of its own) and shuts the socket down; never blocks.
    private func refuse(_ fd: Int32, _ answer: CannedAnswer) {
        refusedCount.add(1, ordering: .relaxed)
        answer.bytes(id: refusalID()).withUnsafeBytes { bytes in
            thumbd_refuse_connection(fd, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        }
    }

    /// Shuts an idle connection's socket down, with no answer (none was asked).
    private func close(_ fd: Int32) {
        refusedCount.add(1, ordering: .relaxed)
        thumbd_refuse_connection(fd, nil, 0)
    }
}


/// An answer written straight to a refused socket, framed once (HTTP/1.1, a length,
/// `Connection: close`); each refusal adds its own `X-Request-Id` between the two parts.
private struct CannedAnswer: Sendable {
    let head: [UInt8]
    let tail: [UInt8]

    func bytes(id: String?) -> [UInt8] {
        guard let id else { return head + tail }
        return head + Array("X-Request-Id: \(id)\r\n".utf8) + tail
    }
}

/// The answers written straight to a refused socket: rendered once, at start, by the
/// handler, and framed here.
private struct Canned: Sendable {
    let tooManyConnections: CannedAnswer
    let shuttingDown: CannedAnswer
    let tooManyParameters: CannedAnswer
    let nulInPath: CannedAnswer
    let requestTimeout: CannedAnswer

    init(limits: ConnectionGuard.Limits, render: (ServerRefusal) -> Response) {
        func frame(_ refusal: ServerRefusal, _ extra: [(String, String)] = []) -> CannedAnswer {
            let response = render(refusal)
            var head = "HTTP/1.1 \(refusal.status) \(Self.reason(refusal.status))\r\n"
            for (name, value) in response.headers + extra { head += "\(name): \(value)\r\n" }
            let tail = "Content-Length: \(response.body.count)\r\nConnection: close\r\n\r\n"
            return CannedAnswer(head: Array(head.utf8), tail: Array(tail.utf8) + response.body.array)
        }
        tooManyConnections = frame(.tooManyConnections, [("Retry-After", "1")])
        shuttingDown = frame(.shuttingDown)
        tooManyParameters = frame(.tooManyParameters(limit: limits.maxQueryParameters))
        nulInPath = frame(.nulInPath)
        requestTimeout = frame(.requestTimeout)
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 408: "Request Timeout"
        case 414: "URI Too Long"
        case 503: "Service Unavailable"
        default: "Error"
        }
    }
}
