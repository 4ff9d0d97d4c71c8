import Synchronization

/// Which keys have a committed row, kept in memory as a count of rows per 64-bit hash of
/// the key, so that a miss costs a hash lookup instead of a SQLite read transaction (two
/// `fcntl` locks and a b-tree search). nginx keeps its cache keys in memory for the same
/// reason (`keys_zone`).
///
/// Never wrong the dangerous way: only the writer adds and deletes rows, and it tells the
/// index once each change has committed, so a key whose row exists is always here. Two
/// keys with one hash only send a lookup on to SQLite. About 16 bytes per stored object.
final class KeyIndex: Sendable {
    private let rows = Mutex<[Int: UInt32]>([:])

    /// False only when no row with `key` exists.
    func mayContain(_ key: String) -> Bool {
        let hash = key.hashValue
        return rows.withLock { $0[hash] != nil }
    }

    func added(_ key: String) {
        let hash = key.hashValue
        rows.withLock { $0[hash, default: 0] += 1 }
    }

    func removed<Keys: Sequence<String>>(_ keys: Keys) {
        let hashes = keys.map(\.hashValue)
        rows.withLock { rows in
            for hash in hashes {
                guard let count = rows[hash] else { continue }
                rows[hash] = count > 1 ? count - 1 : nil
            }
        }
    }

    /// Replaces the contents with exactly `keys` (one per row).
    func reset<Keys: Sequence<String>>(to keys: Keys) {
        var fresh: [Int: UInt32] = [:]
        for key in keys { fresh[key.hashValue, default: 0] += 1 }
        rows.withLock { $0 = fresh }
    }

    var count: Int { rows.withLock { $0.values.reduce(0) { $0 + Int($1) } } }
}
