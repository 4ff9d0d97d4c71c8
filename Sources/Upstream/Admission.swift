import Support

/// Which queued fetches start next: at most `maxConcurrent` running, at most `maxPerHost`
/// per host, the most urgent first (focused on a screen, then by priority: `Urgency.rank`) and
/// the oldest first within a rank (a job's urgency changes while it waits, so it is read at
/// each decision). A plain value with no
/// curl and no threads: the transfer loop owns one, and starts or drops what it returns.
struct Admission<Job: AnyObject> {
    /// Limits a reload may change: jobs already running keep their slots.
    var maxConcurrent: Int
    var maxPerHost: Int
    private let host: (Job) -> String
    private let rank: (Job) -> Int
    /// Waiting jobs, in arrival order.
    private(set) var queued: [Job] = []
    private(set) var running = 0
    private var perHost: [String: Int] = [:]

    init(maxConcurrent: Int, maxPerHost: Int, host: @escaping (Job) -> String, rank: @escaping (Job) -> Int) {
        self.maxConcurrent = maxConcurrent
        self.maxPerHost = maxPerHost
        self.host = host
        self.rank = rank
    }

    mutating func enqueue(_ job: Job) { queued.append(job) }

    /// Takes the jobs to start now out of the queue; their slots count as taken.
    mutating func admit() -> [Job] {
        var started: [Job] = []
        while running < maxConcurrent, let index = nextEligible() {
            let job = queued.remove(at: index)
            running += 1
            perHost[host(job), default: 0] += 1
            started.append(job)
        }
        return started
    }

    /// A job that was started has left (done, cancelled or aborted): its slots are free.
    mutating func finished(_ job: Job) {
        let name = host(job)
        running -= 1
        perHost[name, default: 1] -= 1
        if perHost[name] == 0 { perHost[name] = nil }
    }

    /// Takes a job out of the queue before it started; false when it was not queued.
    mutating func removeQueued(_ job: Job) -> Bool {
        guard let index = queued.firstIndex(where: { $0 === job }) else { return false }
        queued.remove(at: index)
        return true
    }

    /// Empties the queue (shutdown), returning what waited.
    mutating func removeAllQueued() -> [Job] {
        defer { queued.removeAll() }
        return queued
    }

    func runningOn(_ name: String) -> Int { perHost[name, default: 0] }

    /// The most urgent, oldest queued job whose host has room.
    private func nextEligible() -> Int? {
        var best: Int?
        var bestRank = Int.min
        for (index, job) in queued.enumerated() where perHost[host(job), default: 0] < maxPerHost {
            let rank = rank(job)
            if rank > bestRank {
                best = index
                bestRank = rank
            }
        }
        return best
    }
}
