internal import CMicroHTTPD
import Dispatch
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
/// MHD then closes the connection through its own path. Entries are removed in MHD's
/// "closed" notification, which comes before MHD closes the socket, and refusals happen
/// under the same lock, so a socket number is never acted on after it was reused.
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

    /// Nanoseconds on the monotonic clock as the kernel's tick last set it (a few ms old at
    /// most): the deadlines here are seconds, and this is read twice a request.
    private static var now: Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    let limits: Limits
    private let canned: Canned
    private let entries = Mutex(Table())
    private let timer: DeadlineTimer
    private let refusedCount = Atomic<Int>(0)
    private let shuttingDown = Atomic<Bool>(false)

    /// The id each refusal carries as `X-Request-Id` (`HTTPHandler.refusalID`).
    private let refusalID: @Sendable () -> String?

    init(limits: Limits, render: (ServerRefusal) -> Response, refusalID: @escaping @Sendable () -> String?) {
        self.limits = limits
        self.canned = Canned(limits: limits, render: render)
        self.refusalID = refusalID
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "thumbd.server.deadlines"))
        timer = DeadlineTimer(source)
        source.schedule(deadline: .now() + .milliseconds(250), repeating: .milliseconds(250), leeway: .milliseconds(50))
        source.setEventHandler { [weak self] in self?.reap() }
        source.resume()
    }

    func stop() { timer.cancel() }

    /// Connections refused or closed by this guard since start.
    var refused: Int { refusedCount.load(ordering: .relaxed) }

    // MARK: MHD notifications (MHD threads)

    /// Shutdown: from now on every new connection gets 503 shutting_down and a close.
    func refuseNewConnections() { shuttingDown.store(true, ordering: .sequentiallyConsistent) }

    func started(_ fd: Int32) {
        entries.withLock { entries in
            if shuttingDown.load(ordering: .sequentiallyConsistent) {
                refuse(fd, canned.shuttingDown)
                return
            }
            guard entries.count < limits.maxConnections else {
                refuse(fd, canned.tooManyConnections)
                return
            }
            entries[fd] = Entry(phase: .awaiting, since: Self.now)
        }
    }

    func closed(_ fd: Int32) {
        entries.withLock { $0[fd] = nil }
    }

    /// A request line arrived; its query is not parsed yet.
    func requestLine(_ fd: Int32, uri: UnsafePointer<CChar>) {
        var parameters = 0
        var pointer = uri
        var inQuery = false
        var nul = false
        while pointer.pointee != 0 {
            let byte = UInt8(bitPattern: pointer.pointee)
            // "%00" in the path: MHD decodes it in place and the path ends there ("/%00x" is "/").
            if !inQuery && byte == UInt8(ascii: "%") && pointer[1] == 0x30 && pointer[2] == 0x30 { nul = true }
            if byte == UInt8(ascii: "?") && !inQuery {
                inQuery = true
                parameters = 1
            } else if inQuery && (byte == UInt8(ascii: "&") || byte == UInt8(ascii: ";")) {
                parameters += 1
            }
            pointer += 1
        }
        entries.withLock { entries in
            guard let entry = entries[fd], entry.phase != .refused else { return }
            if parameters > limits.maxQueryParameters || nul {
                refuse(fd, nul ? canned.nulInPath : canned.tooManyParameters)
                entries[fd] = Entry(phase: .refused, since: Self.now)
                return
            }
            entries[fd] = Entry(phase: .receiving, since: Self.now)
        }
    }

    /// The request is complete and goes to its handler: no deadline until it is answered.
    /// Returns false when this guard refused the connection already: the request is dropped.
    func processing(_ fd: Int32) -> Bool {
        entries.withLock { entries in
            guard let entry = entries[fd] else { return true }
            if entry.phase == .refused { return false }
            entries[fd]!.phase = .processing
            return true
        }
    }

    /// The response was sent: the connection waits for the next request.
    func completed(_ fd: Int32) {
        entries.withLock { entries in
            if let entry = entries[fd], entry.phase != .refused { entries[fd] = Entry(phase: .awaiting, since: Self.now) }
        }
    }

    // MARK: Deadlines

    private func reap() {
        let now = Self.now
        let idle = limits.idleTimeout.nanoseconds, request = limits.requestTimeout.nanoseconds
        entries.withLock { entries in
            for index in entries.indices {
                guard let entry = entries[Int32(index)] else { continue }
                let expired = switch entry.phase {
                case .awaiting: now - entry.since > idle
                case .receiving: now - entry.since > request
                case .processing, .refused: false
                }
                guard expired else { continue }
                let fd = Int32(index)
                if entry.phase == .receiving { refuse(fd, canned.requestTimeout) } else { close(fd) }
                entries[fd] = nil
            }
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

/// The deadline timer: set up once, cancelled once; Dispatch sources are thread-safe.
private final class DeadlineTimer: @unchecked Sendable {  // Dispatch sources are thread-safe
    private let source: any DispatchSourceTimer
    init(_ source: any DispatchSourceTimer) { self.source = source }
    func cancel() { source.cancel() }
    deinit { source.cancel() }
}
