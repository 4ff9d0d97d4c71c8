import Glibc

/// Process-wide settings a program sets once, at its start (never a library's init).
package enum ProcessLimits {
    /// Raises the soft limit of open files to the hard one: a daemon holding thousands of
    /// event streams needs a socket each.
    package static func raiseOpenFiles() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
