import Dispatch
import Synchronization

/// The lane's threads: each one a `Worker` that reads its mailbox in order.
extension ResizeLane {
    /// One resize thread (or stream worker): it sleeps until it is handed a task, and exits
    /// when told. Its mail is read in the order it was delivered, each piece once: a job
    /// handed over outside the lane's lock, just before `stop()` tells the worker to exit,
    /// is run, not overwritten by the exit (its waiter would never be answered).
    final class Worker: Sendable {
        enum Mail { case task(Task), stream(StreamJob), exit }
        let mailbox = Mutex([Mail]())  // two at most: a job, then the exit
        let wake = DispatchSemaphore(value: 0)
        let exited = DispatchSemaphore(value: 0)

        func deliver(_ mail: Mail) {
            mailbox.withLock { $0.append(mail) }
            wake.signal()
        }

        /// The next piece of mail, waiting for it (each `deliver` signals once).
        func next() -> Mail {
            wake.wait()
            return mailbox.withLock { $0.removeFirst() }
        }
    }
}
