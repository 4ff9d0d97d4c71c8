import BlobStore
import Configuration

/// The store's own defaults: each setting below that the store uses starts from it, so a
/// default is written once, where the value is used.
private let storeDefaults = CacheStore.Configuration(path: "var/thumbd.sqlite")

/// The SQLite cache. Keys live under `store.`.
package struct StoreConfiguration: Sendable {
    /// `store.path`: the database file (WAL mode; `-wal` and `-shm` files sit beside it).
    package var path = storeDefaults.path
    /// `store.maxBytes`: total size of cached bodies; least recently used objects go first.
    package var maxBytes = storeDefaults.maxBytes
    /// `store.defaultTTLSeconds`: freshness when the origin sends no max-age or Expires.
    package var defaultTTLSeconds = 86_400
    /// `store.maxTTLSeconds`: an origin's max-age is capped at this.
    package var maxTTLSeconds = 30 * 86_400
    /// `store.memoryBytes`: recently served objects also kept in memory, in front of SQLite
    /// (0 turns it off). Objects larger than 1/16 of it are never kept there.
    package var memoryBytes = storeDefaults.memoryBytes
    /// `store.graceSeconds`: an expired object is still answered at once for this long
    /// (or the origin's longer `stale-while-revalidate`) while one background refresh
    /// runs, as Varnish's default grace. 0 turns it off: requests wait for the refresh.
    package var graceSeconds = 10
    /// `store.negativeTTLSeconds`: how long an upstream 404/410 is remembered.
    package var negativeTTLSeconds = 60
    /// `store.accessFlushMilliseconds`: last-access times (for LRU) are written in batches this often.
    package var accessFlushMilliseconds = storeDefaults.accessFlushMilliseconds
    /// `store.commitDelayMilliseconds`: a store write waits this long for the writes after
    /// it, so that a burst of fetches commits in one transaction after the burst rather than
    /// in many during it (0: commit as soon as the writer is free).
    package var commitDelayMilliseconds = storeDefaults.commitDelayMilliseconds

    package init() {}

    package init(reader: ConfigReader) throws {
        let r = SettingsSection(reader, "store")
        path = r.string("path", path)
        maxBytes = Int64(try r.int("maxBytes", Int(maxBytes)))
        defaultTTLSeconds = try r.int("defaultTTLSeconds", defaultTTLSeconds)
        maxTTLSeconds = try r.int("maxTTLSeconds", maxTTLSeconds)
        memoryBytes = try r.int("memoryBytes", memoryBytes)
        negativeTTLSeconds = try r.int("negativeTTLSeconds", negativeTTLSeconds)
        graceSeconds = try r.int("graceSeconds", graceSeconds)
        accessFlushMilliseconds = try r.int("accessFlushMilliseconds", accessFlushMilliseconds)
        commitDelayMilliseconds = try r.int("commitDelayMilliseconds", commitDelayMilliseconds)
        try validate()
    }

    /// The store's settings: sizes and paths (the TTLs stay here, with freshness).
    package var blobStore: CacheStore.Configuration {
        var store = CacheStore.Configuration(path: path)
        store.maxBytes = maxBytes
        store.memoryBytes = memoryBytes
        store.accessFlushMilliseconds = accessFlushMilliseconds
        store.commitDelayMilliseconds = commitDelayMilliseconds
        return store
    }

    package func validate() throws {
        try require(!path.isEmpty, "store.path", "must not be empty")
        try require(maxBytes >= 1 << 20, "store.maxBytes", "must be at least 1 MiB")
        try require(defaultTTLSeconds >= 0, "store.defaultTTLSeconds", "must not be negative")
        try require(maxTTLSeconds >= defaultTTLSeconds, "store.maxTTLSeconds", "must be at least store.defaultTTLSeconds")
        try require(memoryBytes >= 0, "store.memoryBytes", "must not be negative")
        try require(graceSeconds >= 0, "store.graceSeconds", "must not be negative")
        try require(negativeTTLSeconds >= 0, "store.negativeTTLSeconds", "must not be negative")
        try require(accessFlushMilliseconds >= 10, "store.accessFlushMilliseconds", "must be at least 10")
        try require((0...1000).contains(commitDelayMilliseconds), "store.commitDelayMilliseconds", "must be between 0 and 1000")
    }
}
