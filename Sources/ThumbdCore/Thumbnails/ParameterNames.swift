/// Which parameter names a request may use. A name thumbd does not know is refused, never
/// ignored: `width=100` must not answer the full-size original.
enum ParameterNames {
    /// `/thumb`'s query parameters.
    static let thumb = ["url"] + ThumbnailParameters.names + ["priority", "fallback", "sig"]
    /// A batch body's keys, and each item's.
    static let batch = ["items", "urls", "priority"] + ThumbnailParameters.names
        + ["preview", "inline", "focus", "cancelOffscreen"]
    static let batchItem = ["url", "id", "sig"] + ThumbnailParameters.names

    /// Names other services use for ours (imgproxy, thumbor, Cloudinary, the HTML attributes).
    static let aliases = [
        "width": "w", "height": "h", "quality": "q", "fmt": "format", "f": "format", "mode": "fit",
        "resize": "fit", "resizing_type": "fit", "crop_gravity": "gravity", "g": "gravity", "src": "url",
        "uri": "url", "signature": "sig", "s": "sig", "pr": "preset", "background": "bg", "rot": "rotate",
        "interlace": "progressive", "focus": "gravity", "x": "fx", "y": "fy",
    ]

    /// Refuses the first unknown name in sorted order (so the answer does not depend on the
    /// order a dictionary keeps); the names are sorted only when one is unknown, which keeps
    /// the check of every `/thumb` request to one lookup per name.
    static func check(_ names: some Collection<String>, known: [String]) throws(ThumbdError) {
        guard names.contains(where: { !known.contains($0) }) else { return }
        for name in names.sorted() where !known.contains(name) {
            let hint = suggestion(for: name, among: known).map { " (did you mean \($0)?)" } ?? ""
            throw .badRequest(.unknownParameter, "\(quoted(name)) is not a parameter thumbd knows\(hint); "
                                  + "the ones it knows are \(known.joined(separator: ", "))")
        }
    }

    /// The known name `name` most likely meant: its alias, or one within two edits of it.
    static func suggestion(for name: String, among known: [String]) -> String? {
        let lowered = name.lowercased()
        if let alias = aliases[lowered], known.contains(alias) { return alias }
        if known.contains(lowered) { return lowered }
        // A typo of another service's name (`widht`).
        let near = aliases.filter { $0.key.count > 3 && known.contains($0.value) }
            .map { (alias: $0.value, distance: distance(lowered, $0.key), name: $0.key) }
            .filter { $0.distance <= 2 }
            .min { ($0.distance, $0.name) < ($1.distance, $1.name) }
        if let near { return near.alias }
        let scored = known.map { ($0, distance(lowered, $0.lowercased())) }.filter { $1 <= min(2, max(1, $0.count / 2)) }
        return scored.min { $0.1 < $1.1 }?.0
    }

    /// A name as the client sent it, shortened and with control characters escaped.
    private static func quoted(_ name: String) -> String {
        let short = name.count > 40 ? String(name.prefix(40)) + "…" : name
        return short.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }
            .joined()
    }

    /// Levenshtein distance (names are short).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.unicodeScalars), b = Array(b.unicodeScalars)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
