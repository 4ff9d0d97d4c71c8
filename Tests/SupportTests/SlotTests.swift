import Foundation
import Support
import Synchronization
import Testing

@Suite("Slot: a callback read from any thread")
struct SlotTests {
    @Test("set, read, replace and clear")
    func setReadClear() {
        let slot = Slot<@Sendable (Int) -> Int>()
        #expect(slot.value == nil)
        slot.set { $0 + 1 }
        #expect(slot.value?(1) == 2)
        slot.set { $0 * 10 }
        #expect(slot.value?(2) == 20)
        slot.set(nil)
        #expect(slot.value == nil)
    }

    /// The reason it exists: a closure read out of a `Mutex` grows by a pair of thunks at each
    /// read (Swift 6.3), so after 10,000 reads its call ran 20,000 frames deeper. Read through
    /// the slot, the call's depth stays what it was.
    @Test("reading it leaves the callback as it was: its call is no deeper after 10,000 reads")
    func readsDoNotDeepen() {
        let depth = Mutex(0)
        let slot = Slot<@Sendable () -> Void>()
        slot.set { depth.withLock { $0 = Thread.callStackReturnAddresses.count } }
        slot.value?()
        let first = depth.withLock { $0 }
        for _ in 0..<10_000 { _ = slot.value }
        slot.value?()
        let after = depth.withLock { $0 }
        #expect(first > 0)
        #expect(after <= first + 2, "the call was \(first) frames deep, and \(after) after 10,000 reads")
    }
}
