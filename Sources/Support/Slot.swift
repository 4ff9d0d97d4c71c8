import Synchronization

/// A value (a callback, mostly) that one thread sets and any thread reads: a `Mutex` around
/// a box that holds it.
///
/// Not `Mutex<(@Sendable () -> Void)?>`: with Swift 6.3, `withLock { $0 }` on a `Mutex`
/// whose value is a closure writes the closure back wrapped in a pair of reabstraction
/// thunks (the value crosses `withLock`'s generic `inout`), so each read makes every later
/// call one layer deeper: quadratic time, then a stack overflow. thumbd's GLib log sink was
/// read so 12 times a resize, and the resize lane's observer once: a daemon slowed down
/// with every thumbnail and crashed after some thousands
/// (https://github.com/swiftlang/swift/issues/91348). A box is a class: reading the
/// reference out of the `Mutex` moves no closure across the generic boundary.
/// `SlotTests` and `SourceRulesTests` keep it so.
package final class Slot<Value: Sendable>: Sendable {
    private final class Box: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    private let box: Mutex<Box?>

    package init(_ value: Value? = nil) {
        box = Mutex(value.map(Box.init))
    }

    /// The value now (nil once cleared, or never set).
    package var value: Value? { box.withLock { $0 }?.value }

    /// Sets (or clears, with nil) the value.
    package func set(_ value: Value?) {
        let new = value.map(Box.init)
        box.withLock { $0 = new }
    }
}
