import BlobStore

/// The cache file from outside the daemon (`thumbd backup`, `thumbd compact`): what
/// `BlobStore` does to it, with the operator's words for its failures.
package enum CacheFile {
    /// A consistent copy of the cache at `path`, written to the new file `destination`,
    /// while a daemon runs or not; returns its size in bytes.
    package static func backup(_ path: String, to destination: String) throws(ThumbdError) -> Int {
        do {
            return try CacheStore.backup(path: path, to: destination)
        } catch {
            throw ThumbdError(.storeUnavailable, "cannot back up \(path) to \(destination): \(error)")
        }
    }

    /// The cache at `path` rebuilt without its free pages; refused while a daemon uses it.
    package static func compact(_ path: String) throws(ThumbdError) -> (before: Int, after: Int) {
        do {
            let done = try CacheStore.compact(path: path)
            return (done.before, done.after)
        } catch {
            throw ThumbdError(.storeUnavailable, "cannot compact \(path): \(error)")
        }
    }
}
