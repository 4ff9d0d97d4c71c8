import Foundation

/// The process's own figures for the standard `process_*` metrics, read from `/proc` and
/// the resource limits (Linux).
enum ProcessStatistics {
    /// User and system CPU time so far.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// The soft limit of open files.
    static func maxOpenFiles() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// When the process started, in seconds since the epoch: its start in clock ticks after
    /// boot (`/proc/self/stat`, field 22) plus the boot time (`/proc/stat`, `btime`).
    static func startTime() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")"),
              let system = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let bootLine = system.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
              let boot = Double(bootLine.dropFirst(6).trimmingCharacters(in: .whitespaces))
        else { return Date().timeIntervalSince1970 }
        // After the command name: field 3 (state) is the first; field 22 is the 20th.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let ticks = Double(fields[19]) else { return Date().timeIntervalSince1970 }
        return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
