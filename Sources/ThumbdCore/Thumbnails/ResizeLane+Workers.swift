import Dispatch
import Foundation
import Support
import Synchronization

/// The lane's threads: started by `start()`, ended by `stop()`, each one a `Worker` that
/// reads its mailbox in order.
extension ResizeLane {
    /// Starts the workers' threads; once. A resize queued before waits for them (the stream
    /// workers' threads start as streams ask for them).
    func start() {
        guard !threadsStarted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let niceness = configuration.niceness
        for (index, worker) in workers.enumerated() {
            let thread = Thread { [self] in
                ThreadName.set("thumbd-resize")
                ThreadPriority.lowerCurrent(to: niceness)
                while case .task(let task) = worker.next() { execute(task, on: index) }
                worker.exited.signal()
            }
            thread.name = "thumbd-resize"
            thread.start()
        }
    }

    /// Stops taking work: the queued tasks are answered `shutting_down`, the running ones are
    /// stopped, and this waits (at most the time limit and a second) until they returned.
    func stop() {
        start()  // a lane never started ends its threads the one way, each after its mail
        let (queued, running, signal) = state.withLock { state -> ([Task], [Task], DispatchSemaphore?) in
            state.stopped = true
            let queued = state.queue
            state.queue.removeAll()
            // Resizes and streamed decodes alike: a stream's job may have been handed to its
            // worker a moment ago, and must run before the worker is told to exit.
            guard state.running + state.streamsRunning > 0 else { return (queued, [], nil) }
            let signal = DispatchSemaphore(value: 0)
            state.idle.append(signal)
            return (queued, Array(state.runningTasks.values), signal)
        }
        roomObserver.set(nil)
        for task in queued where !task.isCancelled { task.drop(.shuttingDown) }
        for task in running { task.cancel() }
        let deadline = DispatchTime.now() + .nanoseconds(Int((configuration.timeLimit + .seconds(1)) / .nanoseconds(1)))
        if let signal { _ = signal.wait(timeout: deadline) }
        // The threads end once idle (one still inside a call libvips cannot stop is left to
        // the process's exit).
        let started = workers + streamWorkers.prefix(state.withLock { $0.streamThreads })
        for worker in started { worker.deliver(.exit) }
        for worker in started { _ = worker.exited.wait(timeout: deadline) }
    }

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
