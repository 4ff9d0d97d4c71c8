import Foundation
import Logging
import Support
import Synchronization
import Upstream

/// Every batch, running or recently finished. Starts each item on the same fetcher and
/// coalescer as `/thumb`; sends keepalives to idle streams; forgets finished batches after
/// `retentionSeconds`.
final class BatchRegistry: Sendable {
    private let batches = Mutex<[String: Batch]>([:])
    private let configuration: BatchConfiguration
    private let source: ObjectSource
    private let policy: DestinationPolicy
    private let queue = DispatchQueue(label: "thumbd.batches")
    private let timer: TimerBox
    /// The lanes that write events to many streams at once; stopped with the registry.
    private let delivery = Delivery()
    /// Every open event stream, whether or not its batch is still kept: keepalives reach a
    /// stream whose batch was dropped (retention, or the kept-memory budget) until it ends.
    private let streams = Mutex<[ObjectIdentifier: EventSubscriber]>([:])

    init(configuration: BatchConfiguration, source: ObjectSource, policy: DestinationPolicy) {
        self.configuration = configuration
        self.source = source
        self.policy = policy
        let timer = DispatchSource.makeTimerSource(queue: queue)
        self.timer = TimerBox(timer)
        let interval = DispatchTimeInterval.milliseconds(Int(configuration.keepaliveSeconds * 1000))
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
    }

    /// Open event streams (for tests, metrics and shutdown).
    var openStreams: Int { streams.withLock { $0.count } }

    /// Batches still running, and all kept (running or recently finished).
    var counts: (running: Int, kept: Int) {
        batches.withLock { batches in (batches.values.filter { !$0.isFinished }.count, batches.count) }
    }

    func create(_ request: BatchRequest) throws(ThumbdError) -> Batch {
        var generator = SystemRandomNumberGenerator()
        let id = (0..<2).map { _ in String(generator.next() as UInt64, radix: 16).leftPadded(to: 16) }.joined()
        let batch = Batch(id: id, items: request.items,
                          progressInterval: .milliseconds(configuration.progressIntervalMilliseconds), delivery: delivery)
        pruneFinished()
        let admitted = batches.withLock { batches -> Bool in
            guard batches.values.filter({ !$0.isFinished }).count < configuration.maxOpen else { return false }
            batches[id] = batch
            return true
        }
        guard admitted else {
            throw .unavailable(.tooManyBatches, "\(configuration.maxOpen) batches are running already")
        }
        for (index, item) in request.items.enumerated() {
            start(batch, index: index, url: item.url, priority: request.priority)
        }
        return batch
    }

    func batch(_ id: String) -> Batch? { batches.withLock { $0[id] } }

    /// Cancels what is still queued or in flight. A transfer others still wait for goes on.
    func cancel(_ batch: Batch) {
        for ticket in batch.cancel() { source.leave(ticket) }
    }

    func subscribe(_ batch: Batch, lastEventID: Int?) -> EventSubscriber {
        let subscriber = EventSubscriber(log: batch.log, lastEventID: lastEventID, retryMilliseconds: configuration.retryMilliseconds) {
            [weak self] id in _ = self?.streams.withLock { $0.removeValue(forKey: id) }
        }
        streams.withLock { $0[ObjectIdentifier(subscriber)] = subscriber }
        return subscriber
    }

    /// Shutdown: wake every stream so it ends (the server refuses to suspend it again).
    func closeStreams() {
        timer.cancel()
        for subscriber in streams.withLock({ Array($0.values) }) { subscriber.wake() }
    }

    /// After the server has stopped: ends the delivery lanes.
    func stop() {
        timer.cancel()
        delivery.stop()
    }

    private func start(_ batch: Batch, index: Int, url: String, priority: Priority) {
        let destination: DestinationPolicy.Destination
        do {
            destination = try policy.validate(url.isEmpty ? nil : url)
        } catch {
            batch.fail(index, error: error)
            return
        }
        let key = destination.url
        batch.setSource(index, src: "/thumb?url=" + QueryValue.encode(key))
        if let stored = source.cached(key), stored.isFresh(at: ObjectSource.now()) {
            source.store.recordAccess(key)
            source.counters.count("hit")
            if stored.status == 200 {
                batch.succeed(index, object: stored, cache: "hit")
            } else {
                batch.fail(index, error: .upstreamStatus(stored.status))
            }
            return
        }
        let joined = source.fetch(destination, priority: priority) { [counters = source.counters] outcome, role in
            counters.count(role == .leader ? "miss" : "coalesced")
            Self.deliver(outcome, to: batch, index: index, cache: role == .leader ? "miss" : "coalesced")
        }
        if let ready = joined.ready {
            source.counters.count("coalesced")
            Self.deliver(ready, to: batch, index: index, cache: "coalesced")
        } else {
            batch.attach(index, ticket: joined.ticket, job: joined.flight)
        }
    }

    private static func deliver(_ outcome: FetchCoalescer.Outcome, to batch: Batch, index: Int, cache: String) {
        switch outcome {
        case .success(let object): batch.succeed(index, object: object, cache: cache)
        case .failure(let error): batch.fail(index, error: error)
        }
    }

    /// Forgets finished batches past their retention, then the oldest finished ones past
    /// `maxKept` or `maxKeptBytes`. Runs before each new batch and on every keepalive tick,
    /// so kept memory stays within the budget plus the batches running meanwhile.
    private func pruneFinished() {
        let now = ContinuousClock.now
        let retention = Duration.seconds(configuration.retentionSeconds)
        batches.withLock { batches in
            var finished: [(id: String, at: ContinuousClock.Instant, bytes: Int)] = []
            for (id, batch) in batches {
                guard let at = batch.finishedAt else { continue }
                if now - at >= retention {
                    batches[id] = nil
                } else {
                    finished.append((id, at, batch.retainedBytes))
                }
            }
            var bytes = finished.reduce(0) { $0 + $1.bytes }
            var count = finished.count
            for oldest in finished.sorted(by: { $0.at < $1.at }) {
                guard count > configuration.maxKept || bytes > configuration.maxKeptBytes else { break }
                batches[oldest.id] = nil
                count -= 1
                bytes -= oldest.bytes
            }
        }
    }

    /// Memory held by finished batches (for tests and /stats).
    var keptFinishedBytes: Int {
        batches.withLock { $0.values.filter(\.isFinished).reduce(0) { $0 + $1.retainedBytes } }
    }

    private func tick() {
        pruneFinished()
        delivery.wake(streams.withLock { Array($0.values) }, keepalive: true)
    }
}

/// The keepalive timer: set up once, cancelled once; Dispatch sources are thread-safe.
private final class TimerBox: @unchecked Sendable {
    private let timer: any DispatchSourceTimer
    init(_ timer: any DispatchSourceTimer) { self.timer = timer }
    func cancel() { timer.cancel() }
    deinit { timer.cancel() }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}
