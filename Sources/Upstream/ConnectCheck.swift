import Support
internal import CCurl
import Foundation
import Glibc
import Logging
import Synchronization

/// Which connections a transfer may make: asked with the address curl resolved (before the
/// socket exists) and with the host of each hop. The product passes its destination policy.
public struct ConnectCheck: Sendable {
    public var allowsAddress: @Sendable (IPAddress) -> Bool
    public var allowsHost: @Sendable (String) -> Bool

    public init(allowsAddress: @escaping @Sendable (IPAddress) -> Bool, allowsHost: @escaping @Sendable (String) -> Bool) {
        self.allowsAddress = allowsAddress
        self.allowsHost = allowsHost
    }

    /// No restriction (tests of the loop itself).
    public static let anything = ConnectCheck(allowsAddress: { _ in true }, allowsHost: { _ in true })
}
