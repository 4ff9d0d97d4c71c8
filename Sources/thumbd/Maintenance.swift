import ArgumentParser
import Foundation
import ThumbdCore

/// Where the maintenance subcommands find the cache file: `--db`, else `store.path` of the
/// settings `serve` would load.
struct CacheFileOption: ParsableArguments {
    @Option(help: "The SQLite cache file (default: store.path of the settings serve would load).")
    var db: String?

    @Option(help: "A YAML or JSON settings file (default: the one serve would load).")
    var config: String?

    func path() async throws -> String {
        if let db { return db }
        return try await Check.load(config).settings.store.path
    }
}

/// `thumbd backup DEST`: a consistent copy of the cache, taken while the daemon runs.
struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy the cache file to a new file, while the daemon runs or not.",
        discussion: """
            SQLite's VACUUM INTO: one read transaction, so the daemon goes on serving and writing; \
            the copy is consistent, compact, and needs no -wal file. To restore, stop the daemon and \
            put the copy at store.path (removing the old file's -wal and -shm). Exit status: 0, or 1 \
            with the reason (DEST exists, the file is missing, the disk is full).
            """)

    @Argument(help: "The new file to write (must not exist).")
    var destination: String

    @OptionGroup var file: CacheFileOption

    func run() async throws {
        let path = try await file.path()
        do throws(ThumbdError) {
            let size = try CacheFile.backup(path, to: destination)
            print("thumbd: backed up \(path) to \(destination) (\(size) bytes)")
        } catch {
            throw Failure(error.message, exitCode: 1)
        }
    }
}

/// `thumbd compact`: the cache file rebuilt without its free pages, the daemon stopped.
struct Compact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Shrink the cache file to what it holds (the daemon must be stopped).",
        discussion: """
            Evictions and purges leave free pages that SQLite reuses for the next inserts, so the \
            file never shrinks by itself (it stays near store.maxBytes). After lowering store.maxBytes \
            or a large purge, stop the daemon and run this: SQLite's VACUUM rebuilds the file, which \
            needs free disk space about the size of what the cache holds. Exit status: 0, or 1 with \
            the reason (a thumbd uses the file, the disk is full).
            """)

    @OptionGroup var file: CacheFileOption

    func run() async throws {
        let path = try await file.path()
        do throws(ThumbdError) {
            let (before, after) = try CacheFile.compact(path)
            print("thumbd: compacted \(path): \(before) bytes, now \(after)")
        } catch {
            throw Failure(error.message, exitCode: 1)
        }
    }
}
