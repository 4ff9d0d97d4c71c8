import Support
internal import CSQLite

/// A failed SQLite call: the result code and SQLite's own text for it.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let context: String

    init(code: Int32, message: String, context: String) {
        self.code = code
        self.message = message
        self.context = context
    }

    init(code: Int32, db: OpaquePointer?, context: String) {
        let text = db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
            ?? String(cString: sqlite3_errstr(code))
        self.init(code: code, message: text, context: context)
    }

    public var description: String { "SQLite error \(code) in \(context): \(message)" }

    /// The file is not a database, or its pages are damaged (SQLITE_NOTADB, SQLITE_CORRUPT).
    public var isDamage: Bool { code & 0xFF == SQLITE_NOTADB || code & 0xFF == SQLITE_CORRUPT }
}
