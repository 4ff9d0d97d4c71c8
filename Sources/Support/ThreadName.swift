import Foundation
import Glibc

package enum ThreadName {
    /// Names the calling thread as `top -H`, perf and gdb show it (15 characters at most).
    /// Foundation's `Thread.name` does not reach the kernel on Linux, and pthread_setname_np
    /// is not visible to Swift without _GNU_SOURCE; the kernel's own file does the same.
    package static func set(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// The calling thread's name, as the kernel has it.
    package static var current: String {
        let data = FileManager.default.contents(atPath: "/proc/thread-self/comm") ?? Data()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The names of this process's threads that start with one of `prefixes`, from the
    /// kernel's list (`/proc/self/task`): how a program checks that a stop left nothing running.
    /// The main thread is not among them (it carries the program's name, which may be
    /// `thumbd-1.2` as well as `thumbd`).
    package static func living(withPrefixes prefixes: [String]) -> [String] {
        let main = String(getpid())
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            guard task != main else { return nil }
            guard let data = FileManager.default.contents(atPath: "/proc/self/task/\(task)/comm") else { return nil }
            let name = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            return prefixes.contains { name.hasPrefix($0) } ? name : nil
        }.sorted()
    }
}

package enum ThreadPriority {
    /// Lowers the calling thread's scheduling priority to `niceness` (0–19). On Linux the nice
    /// value belongs to the thread (setpriority with 0 affects the caller only, NPTL), and
    /// threads it creates afterwards inherit it.
    package static func lowerCurrent(to niceness: Int32) {
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceness)
    }

    /// The calling thread's nice value.
    package static var current: Int32 {
        errno = 0
        return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
    }
}

extension ThreadPriority {
    /// Lowers to `niceness` every thread of this process whose name starts with `prefix`
    /// (threads a library starts and names, such as libvips's workers, whose priority its
    /// API does not set). Threads already at or below it are left alone, and their names are
    /// not read: a resize calls this each time, and most threads are lowered already.
    package static func lower(threadsNamed prefix: String, to niceness: Int32) {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        for task in tasks {
            guard let tid = id_t(task) else { continue }
            errno = 0
            let current = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid)
            guard errno == 0, current < niceness, name(ofTask: task).hasPrefix(prefix) else { continue }
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid, niceness)
        }
    }

    /// A thread's name from the kernel (`comm`, 15 bytes and a newline at most), read
    /// without Foundation's buffers: one open, one read.
    private static func name(ofTask task: String) -> String {
        let fd = open("/proc/self/task/\(task)/comm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return "" }
        return String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .newlines)
    }
}

extension ThreadPriority {
    /// The nice values of this process's threads whose name starts with `prefix`.
    package static func niceness(ofThreadsNamed prefix: String) -> [Int32] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            guard let tid = id_t(task),
                  let data = FileManager.default.contents(atPath: "/proc/self/task/\(task)/comm"),
                  String(decoding: data, as: UTF8.self).hasPrefix(prefix)
            else { return nil }
            return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid)
        }
    }
}
