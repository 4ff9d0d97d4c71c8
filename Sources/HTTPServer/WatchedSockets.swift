/// The sockets of suspended connections an event loop watches (`EventLoop.watch`), and
/// their contexts, by socket number: the kernel hands out the lowest free number, so the
/// array stays near the count of open files, and an entry is found without hashing. 10,000
/// open event streams are 10,000 entries, 16 bytes each. Used under the loop's lock.
struct WatchedSockets {
    /// A token is the socket number with this in the high half, so that an event for a
    /// socket that was closed and its number reused is not taken for the new one's (and a
    /// token is never 0, 1 or 2, the loop's own).
    private var generation: UInt32 = 0
    private var slots: [(token: UInt64, context: RequestContext)?] = []

    mutating func add(fd: Int32, _ context: RequestContext) -> UInt64 {
        generation = generation == .max ? 1 : generation + 1
        let token = UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
        let index = Int(fd)
        if index >= slots.count {
            slots.append(contentsOf: repeatElement(nil, count: max(index + 1, 2 * slots.count) - slots.count))
        }
        slots[index] = (token, context)
        return token
    }

    /// The socket and context of `token`, while it is still the socket's watch.
    func find(_ token: UInt64) -> (fd: Int32, context: RequestContext)? {
        let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: token))
        guard fd >= 0, Int(fd) < slots.count, let slot = slots[Int(fd)], slot.token == token else { return nil }
        return (fd, slot.context)
    }

    mutating func remove(_ token: UInt64) -> (fd: Int32, context: RequestContext)? {
        guard let found = find(token) else { return nil }
        slots[Int(found.fd)] = nil
        return found
    }
}
