import Foundation
import Synchronization
import Testing
import HTTPServer
@testable import ThumbdCore

/// The writer of a suspended event stream's socket: whoever produces an event hands the
/// subscriber to `Delivery`, and a delivery lane wakes it (its waker writes there).
@Suite("Delivery")
struct DeliveryTests {
    /// Records the thread each wake ran on: where the server would write the socket.
    final class ThreadRecorder: StreamWaker, Sendable {
        let threads = Mutex<[String]>([])
        func wake() {
            let name = Thread.current.name ?? "unnamed"
            threads.withLock { $0.append(name) }
        }
    }

    @Test("a subscriber is woken on a delivery lane, never on the producer's thread")
    func oneWriterPerStream() {
        let delivery = Delivery(lanes: 2)
        delivery.start()
        defer { delivery.stop() }
        let log = EventLog()
        let recorders = (0..<4).map { _ in ThreadRecorder() }
        let subscribers = recorders.map { recorder in
            let subscriber = EventStreams(retryMilliseconds: 3000).subscribe(log, lastEventID: nil)
            subscriber.attach(recorder)
            return subscriber
        }
        for _ in 0..<5 {
            delivery.wake(subscribers)  // a few subscribers: before, these were woken on this thread
            for _ in 0..<2_000 where recorders.contains(where: { $0.threads.withLock { $0.isEmpty } }) {
                Thread.sleep(forTimeInterval: 0.005)
            }
        }
        for recorder in recorders {
            let threads = recorder.threads.withLock { $0 }
            #expect(!threads.isEmpty)
            #expect(threads.allSatisfy { $0.hasPrefix("thumbd-deliver") }, "woken on \(threads)")
        }
    }
}
