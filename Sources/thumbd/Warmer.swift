import Foundation
import ThumbdClient

/// `thumbd warm`: opens one batch on a running daemon (`DaemonClient`) and follows its events,
/// drawing a progress bar (done / failed / bytes / rate / ETA) or printing the events as
/// JSON lines. If the stream drops before `end`, it reconnects with `Last-Event-ID`, as
/// EventSource would.
public struct Warmer {
    public struct Failure: Sendable {
        public var url: String
        public var status: Int
        public var error: String
        public var message: String
    }

    public struct Report: Sendable {
        public var total = 0
        public var done = 0
        public var failed: [Failure] = []
        public var cancelled = 0
        public var bytes = 0
        public var milliseconds = 0
    }

    public var client: DaemonClient
    public var priority: String?
    /// Thumbnail parameters for every URL, by their query names (`w`, `h`, `dpr`, `fit`,
    /// `gravity`, `blur`, `preset`, …): the variants are made, not only the originals fetched.
    public var thumbnail: [String: String] = [:]
    /// The `sig` of one URL (with `thumbnail`), when the daemon wants signed URLs.
    public var sign: (@Sendable (String) -> String?)?
    public var json: Bool
    /// Standard output (JSON lines) and the progress line's terminal (standard error).
    public var output: (String) -> Void
    public var progress: (String) -> Void
    public var interactive: Bool

    public init(client: DaemonClient, priority: String?, json: Bool, interactive: Bool,
                output: @escaping (String) -> Void, progress: @escaping (String) -> Void) {
        self.client = client
        self.priority = priority
        self.json = json
        self.interactive = interactive
        self.output = output
        self.progress = progress
    }

    public func run(urls: [String]) async throws -> Report {
        guard !urls.isEmpty else { throw DaemonError(status: 0, error: "no_urls", message: "no URLs to warm") }
        let items = urls.enumerated().map { index, url in
            BatchItem(url: url, id: String(index), options: ThumbdClient.ThumbnailOptions(sig: sign?(url)))
        }
        let options = BatchOptions(thumbnail: ThumbdClient.ThumbnailOptions(more: thumbnail), priority: priority)
        var report = Report(total: urls.count)
        let started = Date()
        var ended = false
        var lastDraw = Date.distantPast
        for try await event in client.batch(items, options) {
            ended = apply(event, to: &report) || ended
            if !json, interactive || Date().timeIntervalSince(lastDraw) > 2 {
                if Date().timeIntervalSince(lastDraw) > 0.1 || ended {
                    draw(report, started: started, final: ended)
                    lastDraw = Date()
                }
            }
        }
        guard ended else { throw DaemonError(status: 0, error: "unreachable", message: "the event stream ended before the batch did") }
        if !json {
            draw(report, started: started, final: true)
            if interactive { progress("\n") }
        }
        return report
    }

    /// Updates the report from one event; true at `end`. With `--json`, each event is a line
    /// `{"event": …, "data": {…}}` with the daemon's fields.
    private func apply(_ event: BatchEvent, to report: inout Report) -> Bool {
        if json, let line = event.jsonLine { output(line + "\n") }
        switch event {
        case .done(let done):
            report.done += 1
            report.bytes += done.bytes
        case .failed(let failure):
            report.failed.append(Failure(url: failure.url, status: failure.status, error: failure.error, message: failure.message))
        case .cancelled:
            report.cancelled += 1
        case .end(let end):
            report.milliseconds = end.ms
            return true
        default: break
        }
        return false
    }

    private func draw(_ report: Report, started: Date, final: Bool) {
        let finished = report.done + report.failed.count + report.cancelled
        let fraction = report.total == 0 ? 1 : Double(finished) / Double(report.total)
        let width = 24
        let filled = Int((fraction * Double(width)).rounded(.down))
        let elapsed = max(Date().timeIntervalSince(started), 0.001)
        let rate = Double(report.bytes) / elapsed
        let eta = finished == 0 || final ? "" : String(format: " ETA %.0fs", elapsed / Double(finished) * Double(report.total - finished))
        let line = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            + "\(finished)/\(report.total) done \(report.done) failed \(report.failed.count)"
            + (report.cancelled > 0 ? " cancelled \(report.cancelled)" : "")
            + " \(Self.size(Double(report.bytes))) \(Self.size(rate))/s" + eta
        progress(interactive ? "\r\u{1B}[2K" + line : line + "\n")
    }

    public static func size(_ bytes: Double) -> String {
        bytes >= 1_048_576 ? String(format: "%.1f MB", bytes / 1_048_576) : String(format: "%.0f KB", bytes / 1024)
    }
}
