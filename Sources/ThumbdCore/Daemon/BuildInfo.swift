import BlobStore
import HTTPServer
import Thumbnailer
import Upstream

/// What this build is: `thumbd --version` and the `thumbd_build_info` metric.
public enum BuildInfo {
    /// The release, as the README's changelog names it.
    public static let version = "0.9.2"

    /// The C libraries underneath, as loaded by this process.
    public static var libraries: [(name: String, version: String)] {
        [("libmicrohttpd", LibMicroHTTPD.version), ("libcurl", LibCurl.version), ("sqlite", LibSQLite.version),
         ("libvips", LibVips.version)]
    }

    /// `thumbd --version`'s text.
    public static var text: String {
        "thumbd \(version)\n" + libraries.map { "\($0.name) \($0.version)" }.joined(separator: "\n")
    }
}
