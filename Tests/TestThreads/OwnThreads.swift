import Foundation
import Support
import Testing

/// Runs each test of a suite on threads of its own instead of the cooperative pool:
/// `@Suite("…", .ownThreads)`.
///
/// A test that calls blocking code (a whole libvips resize, a decode waiting for its feed)
/// holds the thread it runs on until that returns. On the pool, which has as many threads as
/// there are cores, two such tests stop every other test's continuations on a two-core
/// machine: a CI run saw every hostile-origin row resume 20 s late behind the thumbnailer's
/// tests. The test still runs in its own task, so `#expect` and its task-local values work as
/// anywhere; only the threads differ.
package struct OwnThreads: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }

    package func provideScope(for test: Test, testCase: Test.Case?,
                              performing function: @Sendable () async throws -> Void) async throws {
        // Each test case once, not also the suite around it.
        guard testCase != nil else { return try await function() }
        try await withTaskExecutorPreference(ThreadPerJob.shared) { try await function() }
    }
}

extension Trait where Self == OwnThreads {
    /// Each test of the suite runs off the cooperative pool (see `OwnThreads`).
    package static var ownThreads: OwnThreads { OwnThreads() }
}

/// A task executor that runs each job on a new thread: what blocks there blocks no one else.
package final class ThreadPerJob: TaskExecutor {
    package static let shared = ThreadPerJob()
    /// The name of its threads, by which a test can tell where it runs.
    package static let threadName = "test-own-thread"

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        Thread.detachNewThread {
            ThreadName.set(Self.threadName)
            job.runSynchronously(on: executor)
        }
    }
}
