import Support
import Synchronization

/// Recently served objects kept in memory in front of SQLite, so a hot hit costs a hash
/// lookup instead of a query and a blob copy. SQLite stays the truth: an object comes in
/// when a reader has read it from SQLite (`fill`), a new version of a stored key when it is
/// written (`put`), and every evicted or purged one is removed.
///
/// A reader fills it after a SQLite read only if nothing was removed meanwhile (`epoch`),
/// so an object evicted or purged while a reader was looking it up cannot come back.
/// When full, entries go in hash order, which is close to random eviction.
final class HotCache: Sendable {
    private struct State {
        var entries: [String: CachedObject] = [:]
        var bytes = 0
        var epoch: UInt64 = 0
    }

    private let state = Mutex(State())
    private let capacity: Int
    private let largestObject: Int

    init(capacityBytes: Int) {
        capacity = capacityBytes
        largestObject = capacityBytes / 16
    }

    func get(_ key: String) -> CachedObject? {
        guard capacity > 0 else { return nil }
        return state.withLock { $0.entries[key] }
    }

    var epoch: UInt64 { state.withLock { $0.epoch } }

    /// Bytes of bodies held (never above the capacity).
    var heldBytes: Int { state.withLock { $0.bytes } }

    /// After a SQLite read begun at `epoch`: keeps `object` unless something was removed since.
    func fill(_ object: CachedObject, readAt epoch: UInt64) {
        guard capacity > 0, object.body.count <= largestObject else { return }
        state.withLock { state in
            guard state.epoch == epoch, state.entries[object.key] == nil else { return }
            Self.add(object, to: &state, capacity: capacity)
        }
    }

    /// A new version written (before its commit, so that no reader finds the older one
    /// here meanwhile): it replaces any older one.
    func put(_ object: CachedObject) {
        guard capacity > 0 else { return }
        state.withLock { state in
            if let old = state.entries.removeValue(forKey: object.key) { state.bytes -= old.body.count }
            state.epoch &+= 1
            guard object.body.count <= largestObject else { return }
            Self.add(object, to: &state, capacity: capacity)
        }
    }

    func remove(_ keys: [String]) {
        state.withLock { state in
            state.epoch &+= 1
            for key in keys {
                if let old = state.entries.removeValue(forKey: key) { state.bytes -= old.body.count }
            }
        }
    }

    func removeAll() {
        state.withLock { state in
            state.epoch &+= 1
            state.entries.removeAll()
            state.bytes = 0
        }
    }

    private static func add(_ object: CachedObject, to state: inout State, capacity: Int) {
        while state.bytes + object.body.count > capacity, let victim = state.entries.first {
            state.entries.removeValue(forKey: victim.key)
            state.bytes -= victim.value.body.count
        }
        state.entries[object.key] = object
        state.bytes += object.body.count
    }
}
