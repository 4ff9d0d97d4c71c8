/// One write waiting for the writer queue: the object, what to do with it (true when it
/// added bytes, so eviction may be due), and whom to tell.
struct PendingWrite: Sendable {
    var object: CachedObject
    var context: String
    var operation: @Sendable (CachedObject) throws -> Bool
    var completion: @Sendable (Result<Void, any Error>) -> Void
}

/// What the writer queue is asked to do, in the order it was asked: writes, and anything
/// else (a purge) as a barrier between the writes before and after it.
enum WriterTask: Sendable {
    case write(PendingWrite)
    case barrier(@Sendable () -> Void)
}

/// The writer queue's inbox. Tasks that arrive while the writer is busy wait here, so that
/// the next drain finds them together and commits their writes in one transaction; at most
/// one drain is scheduled at a time.
struct WriterMailbox: Sendable {
    private var tasks: [WriterTask] = []
    private var drainScheduled = false

    /// Appends `task`; true when the caller must schedule a drain (none is pending).
    mutating func post(_ task: WriterTask) -> Bool {
        tasks.append(task)
        defer { drainScheduled = true }
        return !drainScheduled
    }

    /// Everything posted so far, in order; a task posted after this schedules a new drain.
    mutating func take() -> [WriterTask] {
        drainScheduled = false
        defer { tasks = [] }
        return tasks
    }
}
