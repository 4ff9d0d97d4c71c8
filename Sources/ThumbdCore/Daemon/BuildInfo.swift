import BlobStore
import HTTPServer
import Thumbnailer
import Upstream

/// What this build is: `thumbd --version` and the `thumbd_build_info` metric.
package enum BuildInfo {
    /// The release, as CHANGELOG.md names it.
    package static let version = "0.14.12"

    /// The C libraries underneath, as loaded by this process.
    package static var libraries: [(name: String, version: String)] {
        [("libmicrohttpd", LibMicroHTTPD.version), ("libcurl", LibCurl.version), ("sqlite", LibSQLite.version),
         ("libvips", LibVips.version)]
    }

    /// `thumbd --version`'s text.
    package static var text: String {
        "thumbd \(version)\n" + libraries.map { "\($0.name) \($0.version)" }.joined(separator: "\n")
    }
}
