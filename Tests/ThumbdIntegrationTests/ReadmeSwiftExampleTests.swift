import Foundation
import Testing
import ThumbdClient
import ThumbdTesting

/// The README's Swift example, compiled and run against the real daemon. Between the
/// markers is the README's block as printed, its server and URLs named by the variables
/// above them; scripts/readme_examples.py checks that the two texts agree.
@Suite("The README's Swift example")
struct ReadmeSwiftExampleTests {
    @Test("runs as printed: an image (a miss, then a hit), then a batch's events to its end")
    func example() async throws {
        try await withOriginAndDaemon { origin, daemon in
            let server = "http://127.0.0.1:\(daemon.port)"
            let a = origin.url("/img/readme-swift-a.jpg"), b = origin.url("/png/readme-swift-b.png")
            var printed: [String] = []
            func print(_ items: Any...) { printed.append(items.map { "\($0)" }.joined(separator: " ")) }
            // README-BEGIN
            let thumbd = DaemonClient(server: server)
            let tile = try await thumbd.image(a, ThumbnailOptions(w: 256, h: 256, fit: "cover"))
            print(tile.cache ?? "", tile.bytes.count)  // miss, then hit
            for try await event in thumbd.batch([a, b]) {
                if case .done(let done) = event { print(done.index, done.src) }  // opened, progress, done, failed, …, end
            }
            // README-END
            #expect(printed.count == 3, "\(printed)")
            #expect(printed.first?.hasPrefix("miss ") == true)
            #expect(Set(printed.dropFirst().compactMap { $0.split(separator: " ").first }) == ["0", "1"])
        }
    }
}
