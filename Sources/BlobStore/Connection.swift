import Support
internal import CSQLite

/// Owns one `sqlite3*`. Not thread-safe: the owner confines it to one thread at a time
/// (the writer queue, or one checked-out reader). Closed explicitly; `deinit` only checks.
final class Connection {
    private var handle: OpaquePointer?
    private var statements: [String: Statement] = [:]
    let path: String

    /// Opens in SQLite's multi-thread mode (`NOMUTEX`): each connection is used by one
    /// thread at a time, so SQLite's per-connection mutex would be pure cost.
    init(path: String, readOnly: Bool) throws {
        self.path = path
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
            | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK else {
            let error = SQLiteError(code: rc, db: db, context: "open \(path)")
            sqlite3_close_v2(db)  // a failed open still allocates a handle
            throw error
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 5_000)
    }

    deinit {
        assert(handle == nil, "Connection to \(path) was not closed")
    }

    func close() {
        statements.removeAll()  // finalizes them (Statement.deinit) before the connection goes
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        if rc != SQLITE_OK {
            let text = errorMessage.map { String(cString: $0) } ?? "unknown"
            sqlite3_free(errorMessage)
            throw SQLiteError(code: rc, message: text, context: sql)
        }
    }

    /// A prepared statement, reused across calls (reset before it is handed out).
    func cached(_ sql: String) throws -> Statement {
        if let statement = statements[sql] {
            statement.reset()
            return statement
        }
        let statement = try Statement(db: handle, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }
}

@available(*, unavailable)
extension Connection: Sendable {}
