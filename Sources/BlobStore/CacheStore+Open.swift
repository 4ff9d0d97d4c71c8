import Support
internal import CSQLite
import Dispatch
import Foundation
import Logging
import Synchronization

/// Opening the file: the writer connection set up and migrated, a damaged file moved aside.
extension CacheStore {
    /// The writer: its connection set up and migrated, the totals and the keys read (which
    /// reads every row's key: a damaged page shows here). Closed again if any of it fails.
    static func startWriter(_ path: String, keys: KeyIndex, hot: HotCache, queue: DispatchQueue) throws -> WriterState {
        let state = WriterState(db: try openWriter(path), queue: queue, keys: keys, hot: hot)
        do {
            try queue.sync {
                try state.loadTotals()
                try state.loadKeys()
            }
        } catch {
            queue.sync { state.close() }
            throw error
        }
        return state
    }

    /// The writer's connection, set up and migrated; closed again if that fails.
    static func openWriter(_ path: String) throws -> Connection {
        let db = try Connection(path: path, readOnly: false)
        do {
            // A new file gets 16 KB pages (an existing one keeps the size it was made with): a
            // body is written a page at a time, to the WAL and again at the checkpoint, each
            // page its own system call, so a 2.7 MB original costs 165 writes instead of 660;
            // measured, its insert takes about half the CPU. Not 64 KB: little more is won,
            // and every small row's commit would write 64 KB pages of each index it touches.
            // Must come before the first write, `journal_mode` included.
            try db.execute("PRAGMA page_size = \(Self.pageSize)")
            try db.execute("PRAGMA journal_mode = WAL")
            // Checkpoint past the same bytes whatever the page size (SQLite counts pages:
            // 1000 of 4 KB by default), so that the WAL stays about 4 MB between checkpoints.
            let query = try db.cached("PRAGMA page_size")
            let pageSize = try query.step() ? Int(query.int64(0)) : 4096
            query.reset()
            try db.execute("PRAGMA wal_autocheckpoint = \(max(1, Self.checkpointBytes / max(pageSize, 512)))")
            // NORMAL in WAL mode: an application crash loses nothing committed; a power loss may
            // lose the last transactions but never corrupts the file. A cache can refetch.
            try db.execute("PRAGMA synchronous = NORMAL")
            // Debian builds SQLite with SECURE_DELETE, which overwrites every freed page: an
            // eviction or purge then writes as much to the WAL as it frees, and on a full
            // disk cannot run at all. A cache has no secrets to scrub; FAST only zeroes
            // what costs no extra I/O.
            try db.execute("PRAGMA secure_delete = FAST")
            // Not mapped, unlike the readers: the writer walks every page it frees or replaces
            // (overflow chains too), and each one mapped counts in the daemon's RSS; with a
            // 1 GiB mapping the soak's RSS tripled (file pages, reclaimable, but what an
            // operator watches), for ~10% less CPU per insert.
            try Schema.migrate(db)
        } catch {
            db.close()
            throw error
        }
        return db
    }

    /// The page size of a new cache file (SQLite's default is 4 KB, its largest 64 KB).
    static let pageSize = 16384
    /// The WAL's size between automatic checkpoints (about SQLite's default, 1000 pages of
    /// 4 KB).
    static let checkpointBytes = 4 << 20

    /// The cache file was written by a newer thumbd: its schema version is past the
    /// migrations this one knows. The file is left as it is (a downgrade must not damage it).
    public struct NewerSchema: Error, CustomStringConvertible {
        public let found: Int
        public let known: Int
        public var description: String {
            "it was written by a newer thumbd (schema version \(found); this one knows up to \(known))"
        }
    }

    /// A failure to set the file up, said plainly (the directory, the system's reason).
    public struct SetupError: Error, CustomStringConvertible {
        public let description: String
    }

    /// `mkdir -p`, with the component that failed and errno's text.
    static func makeDirectory(_ directory: String) throws {
        var path = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o755) != 0, errno != EEXIST {
                throw SetupError(description: "cannot create the directory \(path): \(String(cString: strerror(errno)))")
            }
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                throw SetupError(description: "\(path) is not a directory")
            }
        }
    }

    /// How many damaged files set aside are kept: the newest ones (a disk that damages the
    /// file at every start must not fill up with copies of it).
    static let damagedCopiesKept = 3

    /// Renames a damaged database (and its -wal and -shm) to `<path>.damaged-<UTC time>`;
    /// returns the new path. Copies older than the last `damagedCopiesKept` are removed.
    static func moveAside(_ path: String) throws -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let aside = "\(path).damaged-\(formatter.string(from: Date()))"
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try? FileManager.default.removeItem(atPath: aside + suffix)
            try FileManager.default.moveItem(atPath: path + suffix, toPath: aside + suffix)
        }
        removeOldDamagedCopies(of: path)
        return aside
    }

    /// The copies of `path` set aside as damaged, oldest first (their UTC times sort as text).
    static func damagedCopies(of path: String) -> [String] {
        let directory = (path as NSString).deletingLastPathComponent
        let prefix = (path as NSString).lastPathComponent + ".damaged-"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.isEmpty ? "." : directory)) ?? []
        return names.filter { $0.hasPrefix(prefix) && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
            .sorted()
            .map { directory.isEmpty ? $0 : (directory as NSString).appendingPathComponent($0) }
    }

    private static func removeOldDamagedCopies(of path: String) {
        for copy in damagedCopies(of: path).dropLast(damagedCopiesKept) {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: copy + suffix) }
        }
    }
}
