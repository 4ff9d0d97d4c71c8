internal import CMicroHTTPD

/// The libmicrohttpd this process runs (`thumbd --version`, the build-info metric).
public enum LibMicroHTTPD {
    public static var version: String { MHD_get_version().map { String(cString: $0) } ?? "unknown" }
}
