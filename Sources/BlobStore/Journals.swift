import Support

/// A journal: a small record kept beside the cache in the same SQLite file, for state that
/// must outlive a restart (a batch's definition and what happened to it). It has an id, a
/// definition, numbered entries appended in order, and a `reserved` sequence number: every
/// number used so far, recorded or not, is below it, so numbering can go on after a crash
/// without reusing one. Writes go through the writer queue like the cache's, never making the
/// caller wait: a caller that needs the commit passes a completion.
public struct Journal: Sendable {
    public struct Entry: Sendable, Equatable {
        public var sequence: Int
        public var kind: String
        public var data: Bytes

        public init(sequence: Int, kind: String, data: Bytes) {
            self.sequence = sequence
            self.kind = kind
            self.data = data
        }
    }

    public var id: String
    public var definition: Bytes
    public var createdAt: Int64
    public var finishedAt: Int64?
    public var reserved: Int
    public var entries: [Entry]
}

extension CacheStore {
    /// Starts a journal (replacing one with the same id).
    public func openJournal(id: String, definition: Bytes, createdAt: Int64, reserved: Int) {
        journalWrite("store.journal.open") { db in
            try db.cached("INSERT OR REPLACE INTO journals (id, definition, created_at, finished_at, reserved) VALUES (?, ?, ?, NULL, ?)")
                .run([.text(id), .blob(definition), .integer(createdAt), .integer(Int64(reserved))])
        }
    }

    /// Appends `entries` in one transaction; with `finishedAt`, the journal is finished too.
    public func appendJournal(id: String, _ entries: [Journal.Entry], finishedAt: Int64? = nil) {
        journalWrite("store.journal.append") { db in
            try db.transaction {
                for entry in entries {
                    try db.cached("INSERT OR REPLACE INTO journal_entries (journal, sequence, kind, data) VALUES (?, ?, ?, ?)")
                        .run([.text(id), .integer(Int64(entry.sequence)), .text(entry.kind), .blob(entry.data)])
                }
                if let finishedAt {
                    try db.cached("UPDATE journals SET finished_at = ? WHERE id = ?").run([.integer(finishedAt), .text(id)])
                }
            }
        }
    }

    /// Records that numbers up to `reserved` may be used; `completion` says, on the writer's
    /// queue, whether that committed.
    public func reserveJournal(id: String, upTo reserved: Int, completion: @escaping @Sendable (Bool) -> Void = { _ in }) {
        journalWrite("store.journal.reserve", completion: completion) { db in
            try db.cached("UPDATE journals SET reserved = max(reserved, ?) WHERE id = ?").run([.integer(Int64(reserved)), .text(id)])
        }
    }

    /// Deletes these journals and their entries.
    public func deleteJournals(ids: [String]) {
        journalWrite("store.journal.delete") { db in
            try db.transaction {
                for id in ids {
                    try db.cached("DELETE FROM journal_entries WHERE journal = ?").run([.text(id)])
                    try db.cached("DELETE FROM journals WHERE id = ?").run([.text(id)])
                }
            }
        }
    }

    /// Deletes the journals finished before `finishedBefore`, then the oldest finished ones
    /// past `keepFinished` (in the same second, the first opened), with their entries.
    public func pruneJournals(finishedBefore: Int64, keepFinished: Int) {
        journalWrite("store.journal.prune") { db in
            try db.transaction {
                try db.cached(
                    """
                    DELETE FROM journals WHERE finished_at IS NOT NULL AND (finished_at < ? OR id NOT IN
                        (SELECT id FROM journals WHERE finished_at IS NOT NULL ORDER BY finished_at DESC, rowid DESC LIMIT ?))
                    """
                ).run([.integer(finishedBefore), .integer(Int64(keepFinished))])
                try db.cached("DELETE FROM journal_entries WHERE journal NOT IN (SELECT id FROM journals)").run()
            }
        }
    }

    /// Every journal with its entries, in the order they were opened (at start-up).
    public func loadJournals() throws -> [Journal] {
        try onWriter { db in
            var journals: [Journal] = []
            let rows = try db.cached("SELECT id, definition, created_at, finished_at, reserved FROM journals ORDER BY created_at, rowid")
            while try rows.step() {
                journals.append(Journal(id: rows.text(0) ?? "", definition: rows.blob(1), createdAt: rows.int64(2),
                                        finishedAt: rows.isNull(3) ? nil : rows.int64(3), reserved: Int(rows.int64(4)), entries: []))
            }
            rows.reset()
            let entries = try db.cached("SELECT sequence, kind, data FROM journal_entries WHERE journal = ? ORDER BY sequence")
            for index in journals.indices {
                try entries.bind([.text(journals[index].id)])
                while try entries.step() {
                    journals[index].entries.append(Journal.Entry(sequence: Int(entries.int64(0)), kind: entries.text(1) ?? "",
                                                                 data: entries.blob(2)))
                }
                entries.reset()
            }
            return journals
        }
    }
}
