import Synchronization

/// Lets at most `linesPerWindow` log lines through per window and counts the rest, so a
/// flood of bad requests (or a failing disk) cannot flood the log. The next line that
/// gets through says how many were suppressed before it.
package final class RateLimitedLog: Sendable {
    private struct State {
        var windowStart = ContinuousClock.now
        var lines = 0
        var suppressed = 0
    }

    private let state = Mutex(State())
    private let linesPerWindow: Int
    private let window: Duration

    package init(linesPerWindow: Int, window: Duration) {
        self.linesPerWindow = linesPerWindow
        self.window = window
    }

    /// Runs `log` (with the count suppressed since the last line) unless over the rate.
    package func run(_ log: (_ suppressed: Int) -> Void) {
        let suppressed: Int? = state.withLock { state in
            let now = ContinuousClock.now
            if now - state.windowStart >= window {
                state.windowStart = now
                state.lines = 0
            }
            guard state.lines < linesPerWindow else {
                state.suppressed += 1
                return nil
            }
            state.lines += 1
            defer { state.suppressed = 0 }
            return state.suppressed
        }
        if let suppressed { log(suppressed) }
    }
}
