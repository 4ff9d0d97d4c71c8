internal import CCurl

/// The libcurl this process runs (`thumbd --version`, the build-info metric).
public enum LibCurl {
    public static var version: String {
        guard let info = curl_version_info(CURLVERSION_TENTH), let version = info.pointee.version else { return "unknown" }
        return String(cString: version)
    }
}
