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
///
/// A hit's access time (for the LRU order SQLite keeps) is written into its entry by the
/// lookup that found it, under the same lock and hash, and collected by the store's access
/// flush (`takeAccesses`): a hit pays no second lock, hash and table write for it.
final class HotCache: Sendable {
    private struct Entry {
        var object: CachedObject
        /// Unix milliseconds of the last access not yet flushed; 0: none.
        var accessed: Int64
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var bytes = 0
        var epoch: UInt64 = 0
        /// Keys whose entry got an access since the last flush: the flush visits these, not
        /// every entry. A key is added when its entry's first such access is written.
        var touched: [String] = []
        /// Access times of entries that left (for room, or removed) before the flush.
        var orphans: [String: Int64] = [:]
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
        return state.withLock { $0.entries[key]?.object }
    }

    /// The object, with its access at `milliseconds` recorded for the next flush.
    func get(_ key: String, accessedAt milliseconds: Int64) -> CachedObject? {
        guard capacity > 0 else { return nil }
        return state.withLock { state in
            guard let index = state.entries.index(forKey: key) else { return nil }
            if state.entries.values[index].accessed == 0 { state.touched.append(key) }
            state.entries.values[index].accessed = milliseconds
            return state.entries.values[index].object
        }
    }

    /// The access times recorded since the last call (the latest for each key), now cleared.
    func takeAccesses() -> [String: Int64] {
        state.withLock { state in
            var accesses = state.orphans
            state.orphans = [:]
            for key in state.touched {
                guard let index = state.entries.index(forKey: key) else { continue }
                let accessed = state.entries.values[index].accessed
                guard accessed != 0 else { continue }
                accesses[key] = max(accesses[key] ?? 0, accessed)
                state.entries.values[index].accessed = 0
            }
            state.touched.removeAll(keepingCapacity: state.touched.count < 4096)
            return accesses
        }
    }

    var epoch: UInt64 { state.withLock { $0.epoch } }

    /// Bytes of bodies held (never above the capacity).
    var heldBytes: Int { state.withLock { $0.bytes } }

    /// After a SQLite read begun at `epoch`: keeps `object` unless something was removed since,
    /// with its access at `accessedAt` (milliseconds; 0: none). False when it was not kept (the
    /// caller records the access elsewhere).
    @discardableResult
    func fill(_ object: CachedObject, readAt epoch: UInt64, accessedAt milliseconds: Int64 = 0) -> Bool {
        guard capacity > 0, object.body.count <= largestObject else { return false }
        return state.withLock { state in
            guard state.epoch == epoch, state.entries[object.key] == nil else { return false }
            Self.add(Entry(object: object, accessed: milliseconds), to: &state, capacity: capacity)
            if milliseconds != 0 { state.touched.append(object.key) }
            return true
        }
    }

    /// A new version written (before its commit, so that no reader finds the older one
    /// here meanwhile): it replaces any older one.
    func put(_ object: CachedObject) {
        guard capacity > 0 else { return }
        state.withLock { state in
            let old = state.entries.removeValue(forKey: object.key)
            if let old { state.bytes -= old.object.body.count }
            state.epoch &+= 1
            // The key stays where it was in `touched`: its access moves to the new version.
            guard object.body.count <= largestObject else {
                if let old { Self.orphan(old, key: object.key, in: &state) }
                return
            }
            Self.add(Entry(object: object, accessed: old?.accessed ?? 0), to: &state, capacity: capacity)
        }
    }

    func remove(_ keys: [String]) {
        state.withLock { state in
            state.epoch &+= 1
            for key in keys {
                if let old = state.entries.removeValue(forKey: key) {
                    state.bytes -= old.object.body.count
                    Self.orphan(old, key: key, in: &state)
                }
            }
        }
    }

    func removeAll() {
        state.withLock { state in
            state.epoch &+= 1
            state.entries.removeAll()
            state.bytes = 0
            state.touched.removeAll()
            state.orphans.removeAll()
        }
    }

    private static func add(_ entry: Entry, to state: inout State, capacity: Int) {
        let size = entry.object.body.count
        while state.bytes + size > capacity, let victim = state.entries.first {
            state.entries.removeValue(forKey: victim.key)
            state.bytes -= victim.value.object.body.count
            orphan(victim.value, key: victim.key, in: &state)
        }
        state.entries[entry.object.key] = entry
        state.bytes += size
    }

    /// Keeps the unflushed access of an entry that leaves (a touch of a row gone meanwhile
    /// changes nothing).
    private static func orphan(_ entry: Entry, key: String, in state: inout State) {
        guard entry.accessed != 0 else { return }
        state.orphans[key] = max(state.orphans[key] ?? 0, entry.accessed)
    }
}
