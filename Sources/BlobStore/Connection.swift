import Support
internal import CSQLite

/// Owns one `sqlite3*`. Not thread-safe: the owner confines it to one thread at a time
/// (the writer queue, or one checked-out reader). Closed explicitly; `deinit` only checks.
final class Connection {
    private var handle: OpaquePointer?
    private var statements: [String: Statement] = [:]
    /// Transactions open inside one another (`transaction`).
    private var depth = 0
    /// Outermost transactions committed since the connection was opened.
    private(set) var commits = 0
    /// What waits for the outermost transaction to commit (`onCommit`).
    private var afterCommit: [() -> Void] = []
    let path: String

    /// Opens in SQLite's multi-thread mode (`NOMUTEX`): each connection is used by one
    /// thread at a time, so SQLite's per-connection mutex would be pure cost.
    /// `busyMilliseconds`: how long a statement waits for another connection's lock before
    /// it fails with SQLITE_BUSY.
    init(path: String, readOnly: Bool, busyMilliseconds: Int32 = 5_000) throws {
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
        sqlite3_busy_timeout(db, busyMilliseconds)
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

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws. Inside
    /// another transaction (a group commit), `body` runs in a savepoint of it instead: its
    /// changes commit with the outer transaction, and a failure undoes only its own.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        let nested = depth > 0
        try cached(nested ? "SAVEPOINT part" : "BEGIN IMMEDIATE").run()
        depth += 1
        let registered = afterCommit.count
        defer { depth -= 1 }
        do {
            let value = try body()
            try cached(nested ? "RELEASE part" : "COMMIT").run()
            if !nested {
                commits += 1
                let actions = afterCommit
                afterCommit.removeAll()
                for action in actions { action() }
            }
            return value
        } catch {
            afterCommit.removeSubrange(registered...)
            if nested {
                try? cached("ROLLBACK TO part").run()
                try? cached("RELEASE part").run()
            } else {
                try? cached("ROLLBACK").run()
            }
            throw error
        }
    }

    /// Runs `action` once what is written now is committed: when the outermost transaction
    /// open commits (dropped if the part that asked rolls back), or at once outside one.
    func onCommit(_ action: @escaping () -> Void) {
        if depth == 0 { action() } else { afterCommit.append(action) }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }
}

@available(*, unavailable)
extension Connection: Sendable {}
