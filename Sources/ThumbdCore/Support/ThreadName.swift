import Glibc

enum ThreadName {
    /// Names the calling thread as `top -H`, perf and gdb show it (15 characters at most).
    /// Foundation's `Thread.name` does not reach the kernel on Linux, and pthread_setname_np
    /// is not visible to Swift without _GNU_SOURCE; the kernel's own file does the same.
    static func set(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
