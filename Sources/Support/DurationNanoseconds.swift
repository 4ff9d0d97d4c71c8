import Dispatch

extension Duration {
    /// The whole nanoseconds of this duration (truncated), for the APIs that count in them.
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// The same span as a Dispatch interval.
    package var dispatchInterval: DispatchTimeInterval { .nanoseconds(Int(nanoseconds)) }
}
