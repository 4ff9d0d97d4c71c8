import Foundation
import TestThreads
import Testing
@testable import BlobStore

/// The cache file over time: a file from a newer thumbd refused, damaged copies kept within
/// bounds, a backup taken while the store runs, a compaction that shrinks the file.
@Suite("The cache file over time", .serialized, .ownThreads)
struct CacheFileTests {
    static func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-file-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    static func userVersion(_ path: String) throws -> Int { try pragma("user_version", of: path) }

    static func pragma(_ name: String, of path: String) throws -> Int {
        let db = try Connection(path: path, readOnly: true)
        defer { db.close() }
        let statement = try db.cached("PRAGMA \(name)")
        defer { statement.reset() }
        return try statement.step() ? Int(statement.int64(0)) : -1
    }

    @Test("a file a newer thumbd migrated is refused, named, and left as it was")
    func newerSchemaRefused() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let configuration = CacheStore.Configuration(path: directory.appendingPathComponent("cache.sqlite").path)
        do {
            let store = try CacheStore.open(configuration: configuration)
            try await store.insert(CacheStoreTests.object("a"))
            store.close()
        }
        let newer = Schema.migrations.count + 1
        do {
            let db = try Connection(path: configuration.path, readOnly: false)
            try db.execute("PRAGMA user_version = \(newer)")
            db.close()
        }
        #expect(throws: CacheStore.NewerSchema.self) { try CacheStore.open(configuration: configuration) }
        do {
            _ = try CacheStore.open(configuration: configuration)
        } catch let error as CacheStore.NewerSchema {
            #expect(error.description.contains("newer thumbd") && error.description.contains("\(newer)"))
        }
        // Not taken for damage (nothing moved aside), not migrated, and the lock given back.
        #expect(try Self.userVersion(configuration.path) == newer)
        #expect(CacheStore.damagedCopies(of: configuration.path).isEmpty)
        #expect(throws: CacheStore.NewerSchema.self) { try CacheStore.compact(path: configuration.path) }
        let lock = try FileLock(databasePath: configuration.path)
        lock.release()
    }

    @Test("of the damaged files set aside, the newest three are kept")
    func damagedCopiesBounded() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cache.sqlite").path
        let older = ["20240101T000000Z", "20250101T000000Z", "20250601T000000Z", "20260101T000000Z"]
        for stamp in older {
            try Data("old".utf8).write(to: URL(fileURLWithPath: "\(path).damaged-\(stamp)"))
        }
        try Data("old".utf8).write(to: URL(fileURLWithPath: "\(path).damaged-20240101T000000Z-wal"))
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: path))
        let store = try CacheStore.open(configuration: CacheStore.Configuration(path: path))
        store.close()
        let kept = CacheStore.damagedCopies(of: path).map { ($0 as NSString).lastPathComponent }
        #expect(kept.count == CacheStore.damagedCopiesKept)
        #expect(kept.prefix(2) == ["cache.sqlite.damaged-20250601T000000Z", "cache.sqlite.damaged-20260101T000000Z"])
        #expect(!FileManager.default.fileExists(atPath: "\(path).damaged-20240101T000000Z-wal"))
        #expect(!FileManager.default.fileExists(atPath: "\(path).damaged-20250101T000000Z"))
    }

    @Test("a backup taken while the store writes holds what was committed, and opens as a cache")
    func backupWhileRunning() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cache.sqlite").path
        let copy = directory.appendingPathComponent("backup.sqlite").path
        let store = try CacheStore.open(configuration: CacheStore.Configuration(path: path))
        for index in 0..<20 { try await store.insert(CacheStoreTests.object("k\(index)", size: 1000)) }
        let size = try CacheStore.backup(path: path, to: copy)
        #expect(size > 20 * 1000)
        try await store.insert(CacheStoreTests.object("after", size: 10))  // the store goes on writing
        #expect(throws: CacheStore.SetupError.self) { try CacheStore.backup(path: path, to: copy) }  // never over a file
        store.close()
        let restored = try CacheStore.open(configuration: CacheStore.Configuration(path: copy))
        defer { restored.close() }
        #expect(restored.statistics().objects == 20)
        #expect(try restored.lookup("k7") == CacheStoreTests.object("k7", size: 1000))
        #expect(try restored.lookup("after") == nil)
    }

    @Test("compact shrinks the file a purge left, keeps what it holds, and is refused while a store runs")
    func compactShrinks() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("cache.sqlite").path
        do {
            let store = try CacheStore.open(configuration: CacheStore.Configuration(path: path))
            for index in 0..<40 { try await store.insert(CacheStoreTests.object("k\(index)", size: 50_000)) }
            #expect(throws: FileLock.Held.self) { try CacheStore.compact(path: path) }
            for index in 1..<40 { _ = try store.purge("k\(index)") }
            store.close()
        }
        let done = try CacheStore.compact(path: path)
        #expect(done.before > 40 * 50_000)
        #expect(done.after < 200_000)  // a 16 KB page for each table and index, and k0
        let store = try CacheStore.open(configuration: CacheStore.Configuration(path: path))
        defer { store.close() }
        #expect(store.statistics().objects == 1)
        #expect(try store.lookup("k0") == CacheStoreTests.object("k0", size: 50_000))
    }

    @Test("a new file gets 16 KB pages and a 4 MB WAL; an older file keeps its 4 KB pages until compact")
    func pageSizes() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fresh = directory.appendingPathComponent("new.sqlite").path
        try CacheStore.open(configuration: CacheStore.Configuration(path: fresh)).close()
        #expect(try Self.pragma("page_size", of: fresh) == 16384)

        // A file as an older thumbd made it: SQLite's default page, then the schema.
        let older = directory.appendingPathComponent("older.sqlite").path
        do {
            let db = try Connection(path: older, readOnly: false)
            try db.execute("PRAGMA page_size = 4096")
            try db.execute("PRAGMA journal_mode = WAL")
            try Schema.migrate(db)
            db.close()
        }
        // The writer's connection checkpoints past 4 MB: a connection's setting, not the file's.
        func checkpointPages(_ path: String) throws -> Int64 {
            let writer = try CacheStore.openWriter(path)
            defer { writer.close() }
            let checkpoint = try writer.cached("PRAGMA wal_autocheckpoint")
            defer { checkpoint.reset() }
            return try checkpoint.step() ? checkpoint.int64(0) : -1
        }
        #expect(try checkpointPages(older) == 1024)  // of 4 KB
        #expect(try checkpointPages(fresh) == 256)  // of 16 KB
        do {
            let store = try CacheStore.open(configuration: CacheStore.Configuration(path: older))
            try await store.insert(CacheStoreTests.object("kept", size: 200_000))
            store.close()
        }
        #expect(try Self.pragma("page_size", of: older) == 4096)
        _ = try CacheStore.compact(path: older)
        #expect(try Self.pragma("page_size", of: older) == 16384)
        do {
            let db = try Connection(path: older, readOnly: true)
            defer { db.close() }
            let mode = try db.cached("PRAGMA journal_mode")
            defer { mode.reset() }
            #expect(try mode.step() && mode.text(0) == "wal")  // back in WAL mode after the rebuild
        }
        let store = try CacheStore.open(configuration: CacheStore.Configuration(path: older))
        defer { store.close() }
        #expect(try store.lookup("kept") == CacheStoreTests.object("kept", size: 200_000))
    }
}
