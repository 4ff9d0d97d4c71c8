/// What the lane holds now, for `/metrics`, `/stats` and the tests.
extension ResizeLane {
    /// The highest the running tasks' and streams' estimates have reached together since
    /// start: at most `maxMemoryBytes`, but for one task larger than it running alone.
    var peakEstimatedMemory: Int { state.withLock { $0.peakEstimated } }

    var load: Load {
        state.withLock { Load(running: $0.running, queued: $0.queue.count, memoryInUse: $0.memoryInUse, started: $0.started) }
    }
}
