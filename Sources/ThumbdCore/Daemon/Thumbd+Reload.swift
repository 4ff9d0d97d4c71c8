import Foundation
import Logging
import Upstream

/// SIGHUP's reload: the settings read again, what can change live applied, and the rest
/// named as needing a restart (as nginx's and Varnish's reloads report).
extension Thumbd {
    /// Settings a reload applies while the daemon runs: the signing keys (a key rotated
    /// without dropping the cache or a connection), the log level, which hosts, origins
    /// and destinations are allowed, and the upstream limits.
    package static let liveSettings: Set<String> = Set([
        "signing.keys", "log.level", "server.allowedHosts", "server.allowedOrigins", "upstream.allowHosts",
        "upstream.allowPrivateNetworks",
    ] + transferSettings.map(\.key))

    /// The transfer loops' settings a reload changes: running transfers finish under the old
    /// ones; queued and new ones start under the new. (`upstream.threads`, `caFile` and
    /// `proxy` shape the loops and the destination checks: those take a restart.)
    static let transferSettings: [(key: String, field: any WritableKeyPath<UpstreamConfiguration, Int> & Sendable)] = [
        ("upstream.maxConcurrent", \.maxConcurrent), ("upstream.maxPerHost", \.maxPerHost),
        ("upstream.maxConnectionsPerHost", \.maxConnectionsPerHost), ("upstream.maxQueued", \.maxQueued),
        ("upstream.connectTimeoutMilliseconds", \.connectTimeoutMilliseconds),
        ("upstream.timeoutMilliseconds", \.timeoutMilliseconds),
        ("upstream.lowSpeedBytesPerSecond", \.lowSpeedBytesPerSecond), ("upstream.lowSpeedSeconds", \.lowSpeedSeconds),
        ("upstream.maxObjectBytes", \.maxObjectBytes), ("upstream.maxRedirects", \.maxRedirects),
        ("upstream.maxBufferedBytes", \.maxBufferedBytes),
    ]

    package struct Reload: Sendable, Equatable {
        /// Changed and now in force.
        package var applied: [String] = []
        /// Changed in the file or the environment, still the old value until a restart.
        package var needRestart: [String] = []
    }

    /// Applies `new`'s live settings (`setLogLevel` is the log output's) and reports every
    /// setting that differs from the ones in force, by its key (never its value: a key may
    /// be a secret).
    package func reload(_ new: ThumbdConfiguration, setLogLevel: (Logger.Level) -> Void) -> Reload {
        let old = applied.withLock { $0 }
        let before = Self.flattened(old), after = Self.flattened(new)
        let changed = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }.sorted()
        var report = Reload()
        var now = old
        let transferKeys = changed.filter { key in Self.transferSettings.contains { $0.key == key } }
        if !transferKeys.isEmpty {
            var upstream = old.upstream
            for (key, field) in Self.transferSettings where transferKeys.contains(key) {
                upstream[keyPath: field] = new.upstream[keyPath: field]
            }
            if live.loops.apply(upstream.transferLoop(policy: live.policy)) {
                now.upstream = upstream
                report.applied += transferKeys
            } else {
                report.needRestart += transferKeys  // a limit below the loops running: see TransferLoops.apply
            }
        }
        for key in changed where !transferKeys.contains(key) {
            switch key {
            case "signing.keys":
                live.signer.replaceKeys(new.signing.keys)
                now.signing = new.signing
            case "log.level":
                setLogLevel(new.log.level)
                now.log.level = new.log.level
            case "server.allowedHosts", "server.allowedOrigins":
                live.requestGuard.replace(allowedHosts: new.server.allowedHosts, allowedOrigins: new.server.allowedOrigins)
                now.server.allowedHosts = new.server.allowedHosts
                now.server.allowedOrigins = new.server.allowedOrigins
            case "upstream.allowHosts", "upstream.allowPrivateNetworks":
                live.policy.replace(allowPrivateNetworks: new.upstream.allowPrivateNetworks, allowHosts: new.upstream.allowHosts)
                now.upstream.allowHosts = new.upstream.allowHosts
                now.upstream.allowPrivateNetworks = new.upstream.allowPrivateNetworks
            default:
                report.needRestart.append(key)
                continue
            }
            report.applied.append(key)
        }
        applied.withLock { $0 = now }
        report.applied.sort()
        report.needRestart.sort()
        return report
    }

    /// The parts that hold a live setting, each shared by every holder (its copies see a change).
    struct LiveParts: Sendable {
        let signer: URLSigner
        let policy: DestinationPolicy
        let requestGuard: RequestGuard
        let loops: TransferLoops
    }

    /// Every setting of `configuration` by its dotted key, as text.
    static func flattened(_ configuration: ThumbdConfiguration) -> [String: String] {
        var settings: [String: String] = [:]
        for section in Mirror(reflecting: configuration).children {
            guard let name = section.label, name != "ignoredVariables" else { continue }
            for field in Mirror(reflecting: section.value).children {
                guard let label = field.label else { continue }
                let key = name + "." + label
                let known = SettingNames.known.first { $0.lowercased() == key.lowercased() } ?? key
                settings[known] = String(reflecting: field.value)
            }
        }
        return settings
    }
}
