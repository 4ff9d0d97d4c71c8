import Foundation
import Testing
@testable import ThumbdCore

@Suite("Configuration: file, then THUMBD_* environment, then flags")
struct ConfigurationTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    @Test("defaults are safe: loopback, private networks refused")
    func defaults() throws {
        let configuration = ThumbdConfiguration()
        #expect(configuration.server.listen == "127.0.0.1:8080")
        #expect(configuration.store.path == "var/thumbd.sqlite")
        #expect(!configuration.upstream.allowPrivateNetworks)
        try configuration.server.validate()
        try configuration.store.validate()
        try configuration.upstream.validate()
    }

    @Test("the grid's settings are read and checked: auto's formats, screen first, inline tiles")
    func gridSettings() async throws {
        let loaded = try await ThumbdConfiguration.load(file: nil, environment: [
            "THUMBD_THUMBNAILS_AUTO_FORMATS": "avif, webp,jpeg", "THUMBD_BATCHES_SCREEN_FIRST_MILLISECONDS": "0",
            "THUMBD_BATCHES_MAX_INLINE_BYTES": "4096", "THUMBD_BATCHES_OFFSCREEN_CANCEL_SECONDS": "0.5",
        ])
        #expect(loaded.thumbnails.autoFormats == [.avif, .webp, .jpeg])
        #expect(loaded.batches.screenFirstMilliseconds == 0 && loaded.batches.maxInlineBytes == 4096)
        #expect(loaded.batches.offscreenCancelSeconds == 0.5)
        for (key, value) in [("THUMBD_THUMBNAILS_AUTO_FORMATS", "gif"), ("THUMBD_THUMBNAILS_AUTO_FORMATS", "png"),
                             ("THUMBD_BATCHES_MAX_INLINE_BYTES", "-1"), ("THUMBD_BATCHES_SCREEN_FIRST_MILLISECONDS", "-5")] {
            await #expect(throws: (any Error).self, "\(key)=\(value)") {
                _ = try await ThumbdConfiguration.load(file: nil, environment: [key: value])
            }
        }
    }

    @Test("the resize lane's settings are read and checked")
    func thumbnailSettings() async throws {
        let loaded = try await ThumbdConfiguration.load(file: nil, environment: [
            "THUMBD_THUMBNAILS_WORKERS": "3", "THUMBD_THUMBNAILS_MAX_QUEUED": "5",
            "THUMBD_THUMBNAILS_MAX_MEMORY_BYTES": "67108864", "THUMBD_THUMBNAILS_MAX_AVIF_PIXELS": "100000",
        ])
        #expect(loaded.thumbnails.workers == 3 && loaded.thumbnails.maxQueued == 5)
        #expect(loaded.thumbnails.maxMemoryBytes == 64 << 20 && loaded.thumbnails.maxAVIFPixels == 100_000)
        await #expect(throws: (any Error).self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_WORKERS": "0"])
        }
        await #expect(throws: (any Error).self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_THUMBNAILS_MAX_MEMORY_BYTES": "1000"])
        }
    }

    @Test("later sources win")
    func precedence() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("thumbd.yaml")
        try """
            server:
              listen: 127.0.0.1:9000
              threads: 3
            upstream:
              maxPerHost: 2
              allowHosts: [example.org, "*.cdn.net"]
            """.write(to: file, atomically: true, encoding: .utf8)
        let loaded = try await ThumbdConfiguration.load(
            file: file.path,
            environment: ["THUMBD_SERVER_THREADS": "4", "THUMBD_UPSTREAM_ALLOW_PRIVATE_NETWORKS": "true"],
            overrides: ["server.listen": "127.0.0.1:9001"])
        #expect(loaded.server.listen == "127.0.0.1:9001")  // flag over file
        #expect(loaded.server.threads == 4)  // environment over file
        #expect(loaded.upstream.maxPerHost == 2)  // file over default
        #expect(loaded.upstream.allowPrivateNetworks)
        #expect(loaded.upstream.allowHosts == ["example.org", "*.cdn.net"])
    }

    @Test("a malformed or out-of-range value stops start-up with the key's name")
    func malformed() async throws {
        await #expect(throws: ConfigurationError.self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_SERVER_THREADS": "two"])
        }
        do {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_UPSTREAM_MAX_REDIRECTS": "500"])
            Issue.record("accepted 500 redirects")
        } catch let error as ConfigurationError {
            #expect(error.key == "upstream.maxRedirects")
        }
        await #expect(throws: ConfigurationError.self) {
            _ = try await ThumbdConfiguration.load(file: nil, environment: [:], overrides: ["server.listen": "nowhere"])
        }
        await #expect(throws: ConfigurationError.self) {
            _ = try await ThumbdConfiguration.load(file: "/nonexistent/thumbd.yaml", environment: [:])
        }
        // The operator's settings: a proxy that is not an http:// URL, a signing key too short to
        // be a secret, a metrics address that does not parse, a negative grace.
        for (variable, value, key) in [
            ("THUMBD_UPSTREAM_PROXY", "socks5://10.0.0.1:1080", "upstream.proxy"),
            ("THUMBD_SIGNING_KEYS", "long-enough-key-0123,short", "signing.keys"),
            ("THUMBD_METRICS_LISTEN", "not an address", "metrics.listen"),
            ("THUMBD_STORE_GRACE_SECONDS", "-1", "store.graceSeconds"),
            ("THUMBD_STORE_COMMIT_DELAY_MILLISECONDS", "5000", "store.commitDelayMilliseconds"),
            ("THUMBD_UPSTREAM_THREADS", "0", "upstream.threads"),
        ] {
            do {
                _ = try await ThumbdConfiguration.load(file: nil, environment: [variable: value])
                Issue.record("accepted \(variable)=\(value)")
            } catch let error as ConfigurationError {
                #expect(error.key == key)
            }
        }
    }

    @Test("an unknown key in the file or an unknown THUMBD_ variable refuses the start, with the nearest name")
    func unknownNames() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("thumbd.yaml")
        try "upstream:\n  maxPerHots: 2\n".write(to: file, atomically: true, encoding: .utf8)
        do {
            _ = try await ThumbdConfiguration.load(file: file.path, environment: [:])
            Issue.record("accepted upstream.maxPerHots")
        } catch let error as ConfigurationError {
            #expect(error.key == "upstream.maxPerHots")
            #expect(error.reason.contains("did you mean upstream.maxPerHost?"))
        }
        do {
            _ = try await ThumbdConfiguration.load(file: nil, environment: ["THUMBD_UPSTREAM_MAX_PER_HOTS": "2"])
            Issue.record("accepted THUMBD_UPSTREAM_MAX_PER_HOTS")
        } catch let error as ConfigurationError {
            #expect(error.key == "THUMBD_UPSTREAM_MAX_PER_HOTS")
            #expect(error.reason.contains("did you mean THUMBD_UPSTREAM_MAX_PER_HOST?"))
        }
        // A section given a value, not a mapping of keys.
        try "store: 5\n".write(to: file, atomically: true, encoding: .utf8)
        await #expect(throws: ConfigurationError.self) { _ = try await ThumbdConfiguration.load(file: file.path, environment: [:]) }
        // What is known passes: every setting's variable, the client subcommands' variables,
        // and a file that sets every documented key of the shipped one.
        var environment = Dictionary(uniqueKeysWithValues: ["THUMBD_URL", "THUMBD_SIGNING_KEY"].map { ($0, "x") })
        environment["THUMBD_LOG_FORMAT"] = "json"
        environment["THUMBD_UPSTREAM_MAX_PER_HOST"] = "3"
        let loaded = try await ThumbdConfiguration.load(file: "config/thumbd.yaml", environment: environment)
        #expect(loaded.log.format == .json)
        #expect(loaded.upstream.maxPerHost == 3)
    }

    @Test("Kubernetes's variables for a Service named thumbd are ignored (and listed); a near miss of a setting's is still refused")
    func kubernetesVariables() async throws {
        // What the kubelet sets in every pod of a namespace with `Service thumbd` (port 8080,
        // named http), as docs/concepts/services-networking/service.md lists them.
        let kubernetes = [
            "THUMBD_SERVICE_HOST": "10.0.0.11", "THUMBD_SERVICE_PORT": "8080", "THUMBD_SERVICE_PORT_HTTP": "8080",
            "THUMBD_PORT": "tcp://10.0.0.11:8080", "THUMBD_PORT_8080_TCP": "tcp://10.0.0.11:8080",
            "THUMBD_PORT_8080_TCP_PROTO": "tcp", "THUMBD_PORT_8080_TCP_PORT": "8080", "THUMBD_PORT_8080_TCP_ADDR": "10.0.0.11",
            "THUMBD_CMD": "serve",  // a script's own
        ]
        var environment = kubernetes
        environment["THUMBD_UPSTREAM_MAX_PER_HOST"] = "3"
        let loaded = try await ThumbdConfiguration.load(file: nil, environment: environment)
        #expect(loaded.upstream.maxPerHost == 3)
        #expect(loaded.ignoredVariables == kubernetes.keys.sorted())
        #expect(loaded.server.listen == ThumbdConfiguration().server.listen)  // THUMBD_PORT is not server.listen
        for typo in ["THUMBD_UPSTREAM_MAXPERHOST", "THUMBD_SERVER_LISTN", "THUMBD_LOG_LEVEL_", "THUMBD_STORE_PAHT"] {
            var mistaken = kubernetes
            mistaken[typo] = "1"
            await #expect(throws: ConfigurationError.self, "\(typo)") {
                _ = try await ThumbdConfiguration.load(file: nil, environment: mistaken)
            }
        }
    }

    @Test("log.level, log.format and log.file are read and checked")
    func logSettings() async throws {
        let loaded = try await ThumbdConfiguration.load(
            file: nil, environment: ["THUMBD_LOG_LEVEL": "debug", "THUMBD_LOG_FORMAT": "json", "THUMBD_LOG_FILE": "/tmp/x.log"])
        #expect(loaded.log.level == .debug)
        #expect(loaded.log.format == .json)
        #expect(loaded.log.file == "/tmp/x.log")
        for (variable, value) in [("THUMBD_LOG_LEVEL", "loud"), ("THUMBD_LOG_FORMAT", "xml")] {
            await #expect(throws: ConfigurationError.self) { _ = try await ThumbdConfiguration.load(file: nil, environment: [variable: value]) }
        }
    }

    @Test("without --config: the working directory's config/thumbd.yaml, else /etc/thumbd/thumbd.yaml, else none")
    func defaultFileSearch() {
        #expect(ThumbdConfiguration.defaultFile { _ in true } == "config/thumbd.yaml")
        #expect(ThumbdConfiguration.defaultFile { $0 == "/etc/thumbd/thumbd.yaml" } == "/etc/thumbd/thumbd.yaml")
        #expect(ThumbdConfiguration.defaultFile { _ in false } == nil)
    }
}
