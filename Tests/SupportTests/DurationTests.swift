import Support
import Testing

@Suite("Duration in the units other APIs count in")
struct DurationTests {
    @Test("whole nanoseconds, and the same span for Dispatch")
    func nanoseconds() {
        #expect(Duration.seconds(10).nanoseconds == 10_000_000_000)
        #expect(Duration.milliseconds(50).nanoseconds == 50_000_000)
        #expect((Duration.seconds(2) + .nanoseconds(7)).nanoseconds == 2_000_000_007)
        #expect(Duration.milliseconds(50).dispatchInterval == .nanoseconds(50_000_000))
    }
}
