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

/// The writer queue's inbox. Tasks that arrive while the writer is busy, or while it waits
/// out the commit delay, wait here, so that the next drain finds them together and commits
/// their writes in one transaction; at most one drain of each kind is scheduled at a time.
struct WriterMailbox: Sendable {
    /// The drain a post asks for.
    enum Drain: Equatable {
        /// One is scheduled already that will take this task.
        case scheduled
        /// After the commit delay, so that the writes of a burst commit together, after it.
        case later
        /// At once: a barrier (someone waits for it), a full group, or no delay configured.
        case now
    }

    private var tasks: [WriterTask] = []
    private var pending: Drain = .scheduled  // .scheduled: nothing is
    private var groupWrites = 0
    private var groupBytes = 0

    /// Appends `task` and says which drain the caller must schedule. Writes wait for a
    /// later drain when `delayed`, until they make a full group (`groupWrites` writes or
    /// `groupBytes` bytes); a barrier is never delayed, nor are the writes before it.
    mutating func post(_ task: WriterTask, delayed: Bool, groupWrites maxWrites: Int, groupBytes maxBytes: Int) -> Drain {
        tasks.append(task)
        var urgent = !delayed
        switch task {
        case .write(let write):
            groupWrites += 1
            groupBytes += write.object.body.count
            if groupWrites >= maxWrites || groupBytes >= maxBytes { urgent = true }
        case .barrier:
            urgent = true
        }
        switch (pending, urgent) {
        case (.now, _), (.later, false):
            return .scheduled
        case (_, true):
            pending = .now
            return .now
        case (.scheduled, false):
            pending = .later
            return .later
        }
    }

    /// Everything posted so far, in order; a task posted after this schedules a new drain.
    /// (A delayed drain that finds the mailbox emptied by an earlier one does nothing.)
    mutating func take() -> [WriterTask] {
        pending = .scheduled
        groupWrites = 0
        groupBytes = 0
        defer { tasks = [] }
        return tasks
    }
}
