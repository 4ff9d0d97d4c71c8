import Foundation
import Glibc
import Synchronization
import Thumbnailer

/// A process the tests start (the origin, nginx, openssl): `posix_spawn`, and a thread that
/// waits for its exit.
///
/// Not Foundation's `Process`, for two faults seen when the suite runs its tests on threads
/// of their own, with hundreds of sockets open:
/// - `Process.waitUntilExit` spins the calling thread's run loop and relies on Foundation
///   delivering the child's exit there; from a test's thread it can miss an exit that has
///   already happened and wait forever, holding that thread;
/// - `Process.run` lists `/proc/self/fd` to close the child's descriptors and faulted there
///   (a read past the end of a mapped page) while other threads opened and closed sockets.
///
/// Here the child closes every descriptor above 2 with `posix_spawn`'s own close-from action,
/// and every wait is bounded.
package final class ChildProcess: Sendable {
    /// What the child gets as one of its standard streams.
    package enum Stream: Sendable {
        case null
        /// The test process's own.
        case inherit
        /// This descriptor of the test process (a pipe's end).
        case descriptor(Int32)
    }

    package let pid: pid_t
    private let exit = Exit()

    /// Its wait status once it has exited, told by the thread that waits for it.
    private final class Exit: Sendable {
        let status = Mutex<Int32?>(nil)
        let semaphore = DispatchSemaphore(value: 0)
    }

    package init(_ executable: String, _ arguments: [String], stdin: Stream = .null, stdout: Stream = .null,
                 stderr: Stream = .inherit) throws {
        startLibvipsFirst()  // the child's start reads the environment
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (stream, target, flags) in [(stdin, Int32(0), O_RDONLY), (stdout, 1, O_WRONLY), (stderr, 2, O_WRONLY)] {
            switch stream {
            case .null: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", flags, 0)
            case .inherit: break
            case .descriptor(let fd): posix_spawn_file_actions_adddup2(&actions, fd, target)
            }
        }
        guard Self.closeFrom(&actions, 3) == 0 else { throw HTTPTestError(description: "posix_spawn: no close-from action") }
        // Signals as a fresh process has them: the test process ignores SIGPIPE, and an
        // ignored signal would stay ignored across exec.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), defaults = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var spawned = pid_t()
        let rc = posix_spawn(&spawned, executable, &actions, &attributes, argv, environ)
        guard rc == 0 else { throw HTTPTestError(description: "posix_spawn \(executable): \(String(cString: strerror(rc)))") }
        let pid = spawned
        self.pid = pid
        // Its exit, seen by a thread of its own (a test's thread never blocks in waitpid).
        Thread.detachNewThread { [exit] in
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
            exit.status.withLock { $0 = raw }
            exit.semaphore.signal()
        }
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's
    /// Glibc module does not declare.
    private static let closeFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("glibc 2.34 or later is needed: posix_spawn_file_actions_addclosefrom_np")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    package var isRunning: Bool { exit.status.withLock { $0 == nil } }

    /// Its exit code (-1 while it runs, or when a signal ended it).
    package var terminationStatus: Int32 {
        guard let raw = exit.status.withLock({ $0 }), raw & 0x7F == 0 else { return -1 }
        return (raw >> 8) & 0xFF
    }

    /// Waits until it has exited, at most `timeout`: false if it still runs.
    @discardableResult
    package func waitForExit(timeout: Duration = .seconds(30)) -> Bool {
        if !isRunning { return true }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        guard exit.semaphore.wait(timeout: .now() + seconds) == .success else { return false }
        exit.semaphore.signal()  // for any later wait
        return true
    }

    /// Ends it (SIGTERM, then SIGKILL after 10 s) and waits for its exit, so that nothing of
    /// it answers after this returns.
    package func stop() {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        if waitForExit(timeout: .seconds(10)) { return }
        kill(pid, SIGKILL)
        waitForExit(timeout: .seconds(10))
    }
}

/// libvips's start writes the process environment (VIPSHOME, see `Thumbnailer`), and a setenv
/// while another thread reads the environment can crash that reader. The daemon starts
/// libvips before its own threads; in the test process, where many daemons and children come
/// and go at once, every helper whose threads read the environment (a child's start, a
/// daemon's libcurl) starts it first, once.
package func startLibvipsFirst() {
    _ = try? Thumbnailer()
}
