import Support
internal import CSQLite

/// SQLite wants `SQLITE_TRANSIENT` (a macro casting -1) so that it copies bound bytes, and
/// `SQLITE_STATIC` (nil) when they stay valid until the binding is cleared.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
private let lent: sqlite3_destructor_type? = nil

/// Owns one `sqlite3_stmt*`, finalized in `deinit`. Columns are copied out before the next
/// `step()`, as SQLite only lends their memory until then.
final class Statement {
    private let handle: OpaquePointer
    private let db: OpaquePointer?
    private let sql: String

    init(db: OpaquePointer?, sql: String) throws {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else {
            throw SQLiteError(code: rc, db: db, context: "prepare \(sql)")
        }
        self.handle = statement
        self.db = db
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Binds `values`, copied by SQLite; with `lendingBlobs`, blobs are lent instead, and
    /// the caller keeps them alive until `reset()` (a multi-megabyte image is not copied).
    func bind(_ values: [SQLiteValue], lendingBlobs: Bool = false) throws {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .text(let v): rc = sqlite3_bind_text(handle, index, v, -1, transient)
            case .blob(let v):
                rc = v.withUnsafeBytes {
                    sqlite3_bind_blob64(handle, index, $0.baseAddress, UInt64($0.count), lendingBlobs ? lent : transient)
                }
            }
            precondition(rc != SQLITE_RANGE && rc != SQLITE_MISUSE, "bad bind \(index) in \(sql)")
            if rc != SQLITE_OK { throw SQLiteError(code: rc, db: db, context: "bind \(sql)") }
        }
    }

    /// Steps once: true when a row is ready, false when done.
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw SQLiteError(code: rc, db: db, context: sql)
        }
    }

    /// Binds, runs to completion, and resets; blobs are lent, as `values` outlives the reset.
    func run(_ values: [SQLiteValue] = []) throws {
        try withExtendedLifetime(values) {
            defer { reset() }
            try bind(values, lendingBlobs: true)
            while try step() {}
        }
    }

    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    func text(_ column: Int32) -> String? {
        sqlite3_column_text(handle, column).map { String(cString: $0) }
    }
    func blob(_ column: Int32) -> Bytes {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let base = sqlite3_column_blob(handle, column) else { return .empty }
        return Bytes(copying: UnsafeRawBufferPointer(start: base, count: count))
    }
}

enum SQLiteValue {
    case null
    case integer(Int64)
    case text(String)
    case blob(Bytes)
}

@available(*, unavailable)
extension Statement: Sendable {}
