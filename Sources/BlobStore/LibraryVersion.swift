internal import CSQLite

/// The SQLite this process runs (`thumbd --version`, the build-info metric).
public enum LibSQLite {
    public static var version: String { String(cString: sqlite3_libversion()) }
}
