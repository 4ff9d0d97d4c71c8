import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One daemon per cache file: an exclusive `flock` on a file beside the database
/// (`<path>-lock`), held for the store's life, with the holder's PID written in it so that
/// a second daemon can say which process holds it. The kernel drops the lock when the
/// process ends, however it ends, so a crash never leaves the file locked. Owns its
/// descriptor and closes it in one place.
final class FileLock: Sendable {
    let path: String
    /// The open lock file; -1 once released.
    private let descriptor: Mutex<Int32>

    /// The process holding a lock another one asked for.
    struct Held: Error, CustomStringConvertible {
        let databasePath: String
        let holder: String
        var description: String { "\(databasePath) is used by another thumbd (\(holder)); one daemon per cache file" }
    }

    init(databasePath: String) throws {
        path = databasePath + "-lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw CacheStore.SetupError(description: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = Self.holder(fd)
            close(fd)
            throw Held(databasePath: databasePath, holder: holder)
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        descriptor = Mutex(fd)
    }

    /// "pid 1234, thumbd" from the PID the holder wrote and its /proc entry.
    private static func holder(_ fd: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        let text = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let pid = Int32(text) else { return "a process that has not written its PID yet" }
        let name = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return "pid \(pid)" + (name.map { ", \($0)" } ?? "")
    }

    /// Gives the lock up (the store has closed its database). Unlocked before it is closed:
    /// closing drops the flock only with the open file's last descriptor, and a process this
    /// one is spawning holds a copy of every descriptor until its exec closes them (a store
    /// reopened in that moment, as a restart in-process does, found its own lock held).
    func release() {
        let fd = descriptor.withLock { fd in
            defer { fd = -1 }
            return fd
        }
        guard fd >= 0 else { return }
        _ = flock(fd, LOCK_UN)
        close(fd)
    }

    /// The lock file's descriptor, for a test that copies it as a spawning process does.
    func withDescriptor<R>(_ body: (Int32) -> R) -> R {
        descriptor.withLock { body($0) }
    }

    deinit { release() }
}
