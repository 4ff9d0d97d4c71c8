import Support
internal import CCurl
import Foundation
import Glibc
import Logging
import Synchronization

/// Everything the loop thread owns: the queue, the running transfers, per-host counts.
final class LoopState: @unchecked Sendable {  // handed to the loop thread once, used only there
    private let multi: MultiHandle
    private var configuration: TransferLoop.Configuration
    private let budget: DownloadBudget
    /// The budget's releases when paused transfers were last resumed.
    private var resumedAt: UInt64 = 0
    private let logger: Logger
    private var admission: Admission<FetchJob>
    private var running: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Called once per job that leaves the loop (done, cancelled or aborted).
    var onFinished: () -> Void = {}
    var publish: (TransferLoop.Load) -> Void = { _ in }

    func publishLoad() { publish(TransferLoop.Load(running: running.count, queued: admission.queued.count)) }

    init(multi: MultiHandle, configuration: TransferLoop.Configuration, budget: DownloadBudget, logger: Logger) {
        self.multi = multi
        self.configuration = configuration
        self.budget = budget
        self.logger = logger
        self.admission = Admission(maxConcurrent: configuration.maxConcurrent, maxPerHost: Self.perHostCap(configuration),
                                   host: { $0.host }, rank: { $0.urgency.rank })
    }

    private static func perHostCap(_ configuration: TransferLoop.Configuration) -> Int {
        configuration.maxPerHost > 0 ? configuration.maxPerHost : Int.max
    }

    /// New settings (a reload): the limits hold from the next admission, the transfer
    /// settings for transfers started from now; running ones keep theirs.
    func apply(_ new: TransferLoop.Configuration) {
        configuration = new
        admission.maxConcurrent = new.maxConcurrent
        admission.maxPerHost = Self.perHostCap(new)
        multi.setLimits(maxConnectionsPerHost: new.maxConnectionsPerHost, keptConnections: new.maxConcurrent)
        admit()
    }

    /// Resumes the transfers paused for memory once the budget has given some back since
    /// they were last resumed; each pauses again if there is still no room for it.
    func resumeWaiting() {
        guard let releases = budget.releasesWhilePaused, releases != resumedAt else { return }
        resumedAt = releases
        for transfer in running.values where transfer.waitsForMemory { transfer.resume() }
    }

    func enqueue(_ job: FetchJob) { admission.enqueue(job) }

    /// Starts queued jobs while there is room.
    func admit() {
        for job in admission.admit() { start(job) }
    }

    private func start(_ job: FetchJob, isRetry: Bool = false) {
        let transfer = Transfer(job: job, configuration: configuration, budget: budget, isRetry: isRetry)
        let rc = curl_multi_add_handle(multi.handle, transfer.easy)
        precondition(rc == CURLM_OK, "curl_multi_add_handle: \(rc)")
        running[transfer.easy] = transfer
        logger.debug("fetch.start", metadata: ["upstream.url": "\(job.url)", "fetch.running": "\(running.count)"])
    }

    /// Completes every transfer curl reports as done; returns how many.
    func reapFinished() -> Int {
        var reaped = 0
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi.handle, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            guard let transfer = running[easy] else { continue }
            let outcome = transfer.outcome(code)
            // An answer that is not HTTP on a connection kept from an earlier transfer is
            // most likely that transfer's leftovers (an origin that sent more than its
            // Content-Length): the request is tried once more on a new connection, as
            // browsers retry an idempotent request that failed on a reused connection.
            if case .failure(.badResponse) = outcome, !transfer.isRetry, transfer.reusedConnection {
                running.removeValue(forKey: easy)
                curl_multi_remove_handle(multi.handle, easy)
                logger.debug("fetch.retry", metadata: ["upstream.url": "\(transfer.job.url)"])
                transfer.job.endBody(whole: false)  // its readers would see the new attempt's bytes after the old's
                start(transfer.job, isRetry: true)  // keeps its admission slot
                continue
            }
            _ = detach(easy)
            logger.debug("fetch.done", metadata: [
                "upstream.url": "\(transfer.job.url)", "curl.code": "\(code.rawValue)",
                "fetch.bytes": "\((try? outcome.get())?.body.count ?? transfer.bytesReceived)",
            ])
            transfer.job.complete(outcome)
            onFinished()
            reaped += 1
        }
        return reaped
    }

    func cancel(_ job: FetchJob, with error: UpstreamError) {
        if admission.removeQueued(job) {
            job.complete(.failure(error))
            onFinished()
            return
        }
        if let (easy, _) = running.first(where: { $0.value.job === job }) {
            _ = detach(easy)
            job.complete(.failure(error))
            onFinished()
        }
    }

    func abortAll(with error: UpstreamError) {
        for job in admission.removeAllQueued() {
            job.complete(.failure(error))
            onFinished()
        }
        for easy in Array(running.keys) {
            if let transfer = detach(easy) {
                transfer.job.complete(.failure(error))
                onFinished()
            }
        }
    }

    private func detach(_ easy: UnsafeMutableRawPointer) -> Transfer? {
        guard let transfer = running.removeValue(forKey: easy) else { return nil }
        curl_multi_remove_handle(multi.handle, easy)
        admission.finished(transfer.job)
        return transfer
    }
}
