import Support
internal import CCurl

enum Curl {
    /// `curl_global_init` once per process, before any transfer thread starts.
    static let initialized: Bool = {
        let rc = curl_global_init(thumbd_curl_global_all)
        precondition(rc == CURLE_OK, "curl_global_init failed: \(rc)")
        return true
    }()

    static func check(_ rc: CURLcode, _ what: @autoclosure () -> String) {
        // Every option we set exists in the libcurl we link; a failure is a programming error.
        precondition(rc == CURLE_OK, "curl_easy_setopt(\(what())) failed: \(String(cString: curl_easy_strerror(rc)))")
    }
}
