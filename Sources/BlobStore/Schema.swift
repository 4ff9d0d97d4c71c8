import Support

/// Migrations, applied in order; `PRAGMA user_version` records how many have run.
enum Schema {

    static let migrations: [String] = [
        """
        CREATE TABLE objects (
            key           TEXT PRIMARY KEY NOT NULL,  -- cache key (the normalized URL for now)
            url           TEXT NOT NULL,              -- what the client asked for
            status        INTEGER NOT NULL,           -- 200, or 404/410 for a negative entry
            content_type  TEXT NOT NULL,
            size          INTEGER NOT NULL,           -- length(body), kept for cheap sums
            etag          TEXT NOT NULL,              -- our strong ETag (hash of the body)
            upstream_etag TEXT,                       -- the origin's validators, for revalidation
            last_modified TEXT,
            fetched_at    INTEGER NOT NULL,           -- unix seconds
            expires_at    INTEGER NOT NULL,
            last_access   INTEGER NOT NULL,           -- unix milliseconds, for LRU eviction
            body          BLOB NOT NULL               -- last, so metadata reads skip its pages
        );
        CREATE INDEX objects_by_last_access ON objects(last_access);
        """,
        // Revalidation: how the origin lets the object be served once stale.
        "ALTER TABLE objects ADD COLUMN grace INTEGER NOT NULL DEFAULT 0",
        // Families: an original's key is its URL, and each variant of it has that URL in
        // `url`; purging, evicting or replacing the original takes the variants with it.
        "CREATE INDEX objects_by_url ON objects(url)",
        // Journals: small records that must outlive a restart beside the cache (a batch's
        // definition and outcomes). `reserved`: every sequence number used so far is below it.
        """
        CREATE TABLE journals (
            id          TEXT PRIMARY KEY NOT NULL,
            definition  BLOB NOT NULL,
            created_at  INTEGER NOT NULL,           -- unix seconds
            finished_at INTEGER,                    -- unix seconds, once finished
            reserved    INTEGER NOT NULL
        );
        CREATE TABLE journal_entries (
            journal  TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            kind     TEXT NOT NULL,
            data     BLOB NOT NULL,
            PRIMARY KEY (journal, sequence)
        ) WITHOUT ROWID;
        """,
    ]

    /// The file's schema version (how many migrations have run on it). A file a newer
    /// thumbd has migrated is refused: this one cannot know what its tables mean now, and
    /// writing to them would damage it for the newer one.
    static func version(_ db: Connection) throws -> Int {
        let version = try db.cached("PRAGMA user_version")
        let current = try version.step() ? Int(version.int64(0)) : 0
        version.reset()
        guard current <= migrations.count else { throw CacheStore.NewerSchema(found: current, known: migrations.count) }
        return current
    }

    static func migrate(_ db: Connection) throws {
        let current = try version(db)
        guard current < migrations.count else { return }
        try db.transaction {
            for index in current..<migrations.count {
                try db.execute(migrations[index])
            }
            try db.execute("PRAGMA user_version = \(migrations.count)")
        }
    }
}
