internal import CMicroHTTPD
import Glibc
import Synchronization

/// The listening socket, and how its connections are shared out among the event loops.
///
/// Every loop's epoll set holds the socket (`EPOLLEXCLUSIVE`: a new connection wakes one
/// waiting loop, not all of them), and the loop woken accepts what is waiting. Each
/// connection goes to the loop with the fewest open connections, counting those handed over
/// and not yet taken; a tie keeps it on the loop that accepted it, which hands nothing over.
/// So two loops share a browser's 6 connections 3 and 3, and a benchmark's 64, 32 and 32.
/// swift-nio's and Netty's server channels hand each accepted channel to the next loop of
/// their group in turn; the fewest also evens out what stays open long (event streams).
///
/// Before, each loop's daemon accepted for itself, up to 10 in a row, and whichever woke
/// first took most of a burst: from one wrk run to the next, the two loops' CPU was split
/// anywhere from evenly to all on one, and the hot hit's server CPU per answer moved with it,
/// from 10.6 µs (even) to 17.0 (all on one loop), since a loaded loop and wrk then crowd one
/// core while the other idles (`scripts/BENCHMARKS.md`, 0.14.12).
final class Listener: Sendable {
    let fd: Int32
    let port: UInt16
    private let loops: [EventLoop]
    private let closed = Atomic<Bool>(false)

    /// Connections a loop accepts in one turn at most, before its daemon runs again (MHD's
    /// own accept took 10 in a row).
    private static let perTurn = 16

    /// Takes `fd`, a bound, listening, non-blocking socket (`thumbd_listen`); closes it in
    /// `close`. `loops` are the loops it shares connections among.
    init(fd: Int32, loops: [EventLoop]) {
        self.fd = fd
        self.port = thumbd_socket_port(fd)
        self.loops = loops
    }

    /// Accepts what is waiting, on `loop`'s thread, and hands each connection to its loop.
    /// Returns false when accepting must pause: out of descriptors or memory, the socket
    /// stays readable, and the loop's level-triggered watch would wake it again at once.
    func accept(on loop: EventLoop) -> Bool {
        for _ in 0..<Self.perTurn {
            var socket = AcceptedSocket()
            socket.fd = thumbd_accept(fd, &socket.address, &socket.length)
            guard socket.fd < 0 else {
                target(near: loop).take(socket)
                continue
            }
            switch errno {
            case EINTR, ECONNABORTED, EPROTO, EPERM:
                continue  // that client is gone (or a filter refused it); the next may be there
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                loop.core.log(mhdMessage: "accept: \(String(cString: strerror(errno))); accepting again in 250 ms")
                return false
            default:
                return true  // EAGAIN: nothing left waiting
            }
        }
        return true
    }

    /// The loop with the fewest connections, `loop` on a tie; its count of connections on
    /// their way is raised at once, so that a burst accepted in one turn is shared out too.
    private func target(near loop: EventLoop) -> EventLoop {
        var best = loop
        var fewest = loop.load
        for other in loops where other !== loop {
            let load = other.load
            if load < fewest { (best, fewest) = (other, load) }
        }
        best.expect()
        return best
    }

    /// Once, after every loop stopped.
    func close() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { Glibc.close(fd) }
    }
}

/// An accepted connection on its way to its loop's daemon, with the client's address (which
/// MHD keeps for the connection).
struct AcceptedSocket: Sendable {
    var fd: Int32 = -1
    var address = sockaddr_storage()
    var length = socklen_t(0)
}
