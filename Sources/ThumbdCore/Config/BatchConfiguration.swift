import Configuration

/// Batches and their event streams. Keys live under `batches.`.
package struct BatchConfiguration: Sendable {
    /// `batches.maxItems`: URLs in one batch; more is refused with 413.
    package var maxItems = 1000
    /// `batches.maxOpen`: batches still running at once; past this a new one gets 503.
    package var maxOpen = 1000
    /// `batches.retentionSeconds`: a finished batch stays queryable this long, then 404.
    package var retentionSeconds = 600
    /// `batches.maxKept`: finished batches kept queryable at most; the oldest goes first.
    package var maxKept = 1000
    /// `batches.maxKeptBytes`: memory finished batches may hold (their events and items);
    /// past it the oldest finished batch goes first (then 404, like an expired one).
    package var maxKeptBytes = 64 << 20
    /// `batches.keepaliveSeconds`: a `: keepalive` comment on idle event streams this often.
    package var keepaliveSeconds = 15.0
    /// `batches.retryMilliseconds`: the `retry:` an event stream starts with (EventSource's
    /// reconnection delay).
    package var retryMilliseconds = 3000
    /// `batches.progressIntervalMilliseconds`: at most one progress event per item this often.
    package var progressIntervalMilliseconds = 250
    /// `batches.offscreenCancelSeconds`: in a batch posted with `"cancelOffscreen": true`, an
    /// item that was on screen and has been off it this long is cancelled (it is taken up
    /// again if it comes back). Long enough that a quick scroll back and forth keeps its work.
    package var offscreenCancelSeconds = 2.0
    /// `batches.screenFirstMilliseconds`: in a batch posted with `"focus"`, the items off
    /// screen start once every item on screen has finished, or after this long at most (a
    /// slow origin on screen must not hold the rest back); 0: all start at once.
    package var screenFirstMilliseconds = 2000
    /// `batches.maxInlineBytes`: in a batch posted with `"inline": true`, a `done` whose
    /// image is at most this large carries it as a data URI (a grid tile: a few kilobytes).
    package var maxInlineBytes = 16 << 10

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "batches")
        maxItems = try r.int("maxItems", maxItems)
        maxOpen = try r.int("maxOpen", maxOpen)
        retentionSeconds = try r.int("retentionSeconds", retentionSeconds)
        maxKept = try r.int("maxKept", maxKept)
        maxKeptBytes = try r.int("maxKeptBytes", maxKeptBytes)
        keepaliveSeconds = try r.double("keepaliveSeconds", keepaliveSeconds)
        retryMilliseconds = try r.int("retryMilliseconds", retryMilliseconds)
        progressIntervalMilliseconds = try r.int("progressIntervalMilliseconds", progressIntervalMilliseconds)
        offscreenCancelSeconds = try r.double("offscreenCancelSeconds", offscreenCancelSeconds)
        screenFirstMilliseconds = try r.int("screenFirstMilliseconds", screenFirstMilliseconds)
        maxInlineBytes = try r.int("maxInlineBytes", maxInlineBytes)
        try validate()
    }

    package func validate() throws {
        try require(maxItems >= 1, "batches.maxItems", "must be positive")
        try require(maxOpen >= 1, "batches.maxOpen", "must be positive")
        try require(retentionSeconds >= 0, "batches.retentionSeconds", "must not be negative")
        try require(maxKept >= 0, "batches.maxKept", "must not be negative")
        try require(maxKeptBytes >= 0, "batches.maxKeptBytes", "must not be negative")
        try require(keepaliveSeconds >= 0.05, "batches.keepaliveSeconds", "must be at least 0.05")
        try require(retryMilliseconds >= 0, "batches.retryMilliseconds", "must not be negative")
        try require(progressIntervalMilliseconds >= 0, "batches.progressIntervalMilliseconds", "must not be negative")
        try require(offscreenCancelSeconds >= 0, "batches.offscreenCancelSeconds", "must not be negative")
        try require(screenFirstMilliseconds >= 0, "batches.screenFirstMilliseconds", "must not be negative")
        try require((0...(1 << 20)).contains(maxInlineBytes), "batches.maxInlineBytes", "must be 0 to 1048576")
    }
}
