import Foundation
import Support
#if canImport(Glibc)
import Glibc
#endif

/// A file of `size` bytes beside the database, kept so that a purge can still run when the
/// disk is full: deleting rows writes WAL frames too, and with no byte free even
/// `DELETE FROM objects` fails. The purge gives the reserve up and retries; the reserve is
/// made again once writes succeed (at most once a minute). Used on the writer queue only.
final class SpaceReserve: @unchecked Sendable {  // confined to the writer queue
    let path: String
    let size: Int
    private var lastAttempt: ContinuousClock.Instant?

    init(databasePath: String, size: Int = 1 << 20) {
        path = databasePath + "-reserve"
        self.size = size
    }

    /// One `stat` after every write: `FileManager.attributesOfItem` would also read
    /// /etc/passwd and /etc/group (for the owner's names) and the extended attributes.
    var isHeld: Bool {
        var info = stat()
        return stat(path, &info) == 0 && Int(info.st_size) == size
    }

    /// Makes the reserve if it is missing and the last attempt is a minute old. A partial
    /// file (the disk filled meanwhile) is removed again.
    func ensure() {
        guard !isHeld else { return }
        if let lastAttempt, ContinuousClock.now - lastAttempt < .seconds(60) { return }
        lastAttempt = .now
        let zeros = Data(count: size)
        do {
            try zeros.write(to: URL(fileURLWithPath: path))
        } catch {
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    /// Gives the space back; true when there was a reserve to give.
    func release() -> Bool {
        guard isHeld else { return false }
        lastAttempt = .now
        return (try? FileManager.default.removeItem(atPath: path)) != nil
    }
}
