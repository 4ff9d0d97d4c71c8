import Foundation

/// The cache file over time, from outside a daemon: a copy taken while one runs (`backup`),
/// and the file rebuilt without its free pages while none runs (`compact`).
extension CacheStore {
    /// What `compact` did: the file's size before and after, in bytes.
    public struct Compaction: Sendable, Equatable {
        public let before: Int
        public let after: Int
    }

    /// Writes a consistent copy of the cache at `path` to `destination` (SQLite's
    /// `VACUUM INTO`: one read transaction, so a daemon using the file goes on reading and
    /// writing meanwhile; the copy has no free pages and needs no -wal). `destination` must
    /// not exist. Returns the copy's size in bytes.
    public static func backup(path: String, to destination: String) throws -> Int {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SetupError(description: "\(path) does not exist")
        }
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw SetupError(description: "\(destination) exists already; a backup is written to a new file")
        }
        let db = try Connection(path: path, readOnly: false)
        defer { db.close() }
        _ = try Schema.version(db)  // a newer thumbd's file is refused
        try db.execute("VACUUM INTO \(quoted(destination))")
        return size(destination)
    }

    /// Rebuilds the cache file at `path` without the free pages evictions and purges leave
    /// (SQLite keeps them for the next inserts, so the file never shrinks by itself), with the
    /// page size a new file gets (`pageSize`; a file made by an older thumbd has 4 KB pages,
    /// and SQLite changes the size only in a rebuild outside WAL mode). Takes the daemon's
    /// lock: refused while a thumbd uses the file. Needs free disk space about the size of
    /// what the cache holds while it runs.
    public static func compact(path: String) throws -> Compaction {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SetupError(description: "\(path) does not exist")
        }
        let lock = try FileLock(databasePath: path)
        defer { lock.release() }
        let db = try Connection(path: path, readOnly: false)
        defer { db.close() }
        _ = try Schema.version(db)  // a newer thumbd's file is refused
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let before = size(path)
        try db.execute("PRAGMA journal_mode = DELETE")
        try db.execute("PRAGMA page_size = \(pageSize)")
        try db.execute("VACUUM")
        try db.execute("PRAGMA journal_mode = WAL")
        return Compaction(before: before, after: size(path))
    }

    /// An SQL string literal.
    private static func quoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    private static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }
}
