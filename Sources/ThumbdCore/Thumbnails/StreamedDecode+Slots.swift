import Foundation
import Support
import Synchronization
import Thumbnailer
import Upstream

/// The slots of the decodes that read an original while it downloads.
extension StreamedDecode {
    /// The streams that may decode at once (`thumbnails.streams`), and those waiting for one
    /// of them, oldest first: a stream that starts late catches up, as its bytes are kept.
    ///
    /// A stream whose body is whole before it had a slot (a small original, while the slots
    /// are held by large ones still downloading) would otherwise go to the lane, at nice 10:
    /// it takes one of `extra` slots beyond the limit instead (one per core: it computes
    /// from start to end, waiting for no byte), or is the first served when a slot frees.
    final class Slots: Sendable {
        let limit: Int
        let extra: Int
        private struct State {
            var running = 0
            var waiting: [StreamedDecode] = []
        }
        private let state = Mutex(State())
        /// The slots beyond the limit: one per core.
        static let extraSlots = ProcessInfo.processInfo.activeProcessorCount

        init(limit: Int, extra: Int = extraSlots) {
            self.limit = limit
            self.extra = extra
        }

        /// A slot for `stream` now (true), or a place in the line (false).
        func take(for stream: StreamedDecode) -> Bool {
            state.withLock { state in
                guard state.running < limit else {
                    state.waiting.append(stream)
                    return false
                }
                state.running += 1
                return true
            }
        }

        /// A whole body's stream, waiting: a slot beyond the limit now, if one of `extra` is free.
        func takeExtra(for stream: StreamedDecode) -> Bool {
            state.withLock { state in
                guard state.running < limit + extra,
                      let index = state.waiting.firstIndex(where: { $0 === stream }) else { return false }
                state.waiting.remove(at: index)
                state.running += 1
                return true
            }
        }

        /// A decode ended: its slot goes to a waiting stream whose body is whole, else to the
        /// oldest waiting; a slot beyond the limit goes to a whole body's stream only.
        func give() {
            while let next = state.withLock({ state -> StreamedDecode? in
                let whole = state.waiting.firstIndex { $0.feed.isWhole }
                guard !state.waiting.isEmpty, state.running <= limit || whole != nil else {
                    state.running -= 1
                    return nil
                }
                return state.waiting.remove(at: whole ?? 0)
            }) {
                if next.slotGiven() { return }  // it runs in the slot; else the next one may
            }
        }

        var inUse: Int { state.withLock { $0.running } }
    }
}
