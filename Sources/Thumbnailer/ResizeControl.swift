internal import CVips

/// What stops one resize: its deadline, and a cancel that any thread may call while a
/// libvips thread evaluates the image. Owns one reference to the C control block
/// (`thumbd_vips_control`, reference-counted: every image watched holds one more), released
/// in `deinit`.
///
/// `@unchecked Sendable`: the block's deadline is written once, before it is shared, and
/// its flag is read and written with GLib's atomics only.
public final class ResizeControl: @unchecked Sendable {  // deadline written before sharing; flag by GLib atomics
    let raw: UnsafeMutablePointer<thumbd_vips_control>
    public let timeLimit: Duration

    public init(timeLimit: Duration) {
        self.timeLimit = timeLimit
        raw = thumbd_vips_control_new(gint64(timeLimit / .microseconds(1)))
    }

    deinit { thumbd_vips_control_release(raw) }

    /// Stops the evaluation at its next tile; a resize not yet started fails at once.
    public func cancel() { thumbd_vips_control_cancel(raw) }

    public var isCancelled: Bool { thumbd_vips_control_cancelled(raw) != 0 }

    public var isExpired: Bool { thumbd_vips_control_expired(raw) != 0 }

    func watch(_ image: UnsafeMutablePointer<VipsImage>) { thumbd_vips_watch(image, raw) }

    /// The error a failed evaluation means: cancelled, out of time, or `otherwise`.
    func failure(otherwise: ThumbnailerError) -> ThumbnailerError {
        if isCancelled { return .cancelled }
        if isExpired { return .timedOut(timeLimit) }
        return otherwise
    }
}
