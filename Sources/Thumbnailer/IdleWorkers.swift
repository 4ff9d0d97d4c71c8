internal import CVips
import Foundation

/// libvips 8.14's worker threads lose a task when one of them stops for being idle.
///
/// A libvips worker waits for its next task with `vips_semaphore_down_timeout`, 15 s at most;
/// when that wait times out, the worker takes itself off the set's lists and exits. If a
/// pipeline took the same worker from the free list and handed it a task between the
/// timeout and that removal, the task is dropped: the pipeline's caller waits in
/// `vips_threadpool_run` for a tick that never comes, forever. The window is wide when the
/// worker waits for a core (thumbd lowers libvips's workers to nice 10), and the parallel
/// test suite hit it in about one run of three: a PNG, WebP or GIF encode that never
/// returned, with the pipeline's worker gone from the thread list.
///
/// libvips calls the wait through its own exported symbol (its PLT), so the definition
/// below, exported from the thumbd executable, is the one it reaches. With libvips 8.14 the
/// wait has no timeout: an idle worker stays, as in the libvips releases before the idle
/// timeout, and the number of workers stays at the peak of pipelines at once (the lane's
/// workers and streams bound it). With any other libvips, the call goes to libvips's own
/// function unchanged.
@_cdecl("vips_semaphore_down_timeout")
public func thumbd_vips_semaphore_down_timeout(_ semaphore: UnsafeMutableRawPointer?, _ timeout: Int64) -> Int32 {
    guard let semaphore else { return -1 }
    let pointer = semaphore.assumingMemoryBound(to: VipsSemaphore.self)
    if IdleWorkers.waitWithoutTimeout { return vips_semaphore_down(pointer) }
    guard let original = IdleWorkers.libvipsWait else { return vips_semaphore_down(pointer) }
    return original(pointer, timeout)
}

enum IdleWorkers {
    typealias Wait = @convention(c) (UnsafeMutablePointer<VipsSemaphore>?, Int64) -> Int32

    /// The libvips releases whose idle timeout loses a task: 8.14 (the timeout came with its
    /// new thread set).
    static let waitWithoutTimeout = vips_version(0) == 8 && vips_version(1) == 14

    /// libvips's own `vips_semaphore_down_timeout` (the next definition after thumbd's).
    static let libvipsWait: Wait? = {
        let next = UnsafeMutableRawPointer(bitPattern: -1)  // RTLD_NEXT
        guard let symbol = dlsym(next, "vips_semaphore_down_timeout") else { return nil }
        return unsafeBitCast(symbol, to: Wait.self)
    }()

    /// Whether libvips's calls reach the definition above: the process's first definition of
    /// the symbol is not libvips's own. False when the executable does not export it.
    static var interposed: Bool {
        guard let first = dlsym(nil, "vips_semaphore_down_timeout"), let libvips = libvipsWait else { return false }
        return first != unsafeBitCast(libvips, to: UnsafeMutableRawPointer.self)
    }
}

extension Thumbnailer {
    /// Whether this process is open to libvips 8.14's lost task (`IdleWorkers`): libvips is
    /// 8.14 and its workers' wait does not reach thumbd's. The daemon says so at start.
    public static var losesIdleWorkerTasks: Bool { IdleWorkers.waitWithoutTimeout && !IdleWorkers.interposed }
}
