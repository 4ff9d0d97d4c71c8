import Foundation
import Support
import Upstream

/// A parsed `POST /batches` body: `{"items": [{"url", "id"}], "priority", …}` or
/// `{"urls": [...]}`. Only the request as a whole can be refused here (malformed JSON, no
/// items, too many); a bad URL becomes that item's `failed` event later, so an item of the
/// wrong shape decodes as an empty URL rather than failing the body.
struct BatchRequest {
    var items: [(clientID: String?, url: String)]
    var priority: Priority
    /// The thumbnail parameters (`ThumbnailParameters.names`) for every item (nil: the originals).
    var thumbnail: ThumbnailParameters?
    /// The raw parameters, in the order of `ThumbnailParameters.names`, for each item's `src`.
    var thumbnailQuery: [(String, String)]
    /// The batch's raw thumbnail parameters, and each item's own (which win over them).
    var parameters: [String: String]
    var itemParameters: [[String: String]]
    /// Each item's `sig` (signed URLs).
    var itemSignatures: [String?]
    /// `"preview": true`: each `done` also carries a tiny inline image.
    var preview: Bool
    /// `"inline": true`: a `done` whose image is small (`batches.maxInlineBytes`) also
    /// carries it, as a data URI: the page needs no request per tile.
    var inline: Bool
    /// `"focus": [indices]`: the items on screen now, fetched and made first.
    var focus: [Int]
    /// `"cancelOffscreen": true`: items that left the screen long ago are cancelled.
    var cancelOffscreen: Bool
    /// Posted by thumbd's own page (`GET /`, same origin): with signing on, its items need no
    /// `sig`, and the daemon signs their `src` (set by the handler, not by the body).
    var fromOwnPage = false

    init(body: Bytes, maxItems: Int, presets: Presets = Presets()) throws(ThumbdError) {
        // Foundation's decoder takes invalid UTF-8 inside a string (it substitutes); JSON
        // is UTF-8 (RFC 8259 §8.1), and a URL made of replacement characters is no URL.
        guard body.array.withUnsafeBufferPointer({ String(validating: $0, as: UTF8.self) }) != nil else {
            throw .badRequest(.malformedJSON, "the body is not valid UTF-8")
        }
        let decoded: Body
        do {
            decoded = try JSONDecoder().decode(Body.self, from: Data(body.array))
        } catch let error as ThumbdError {
            throw error
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
            throw .badRequest(.malformedJSON, "the body must be a JSON object")
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            throw .badRequest(.malformedJSON, "\(context.codingPath.map(\.stringValue).joined(separator: ".")) has the wrong type")
        } catch {
            throw .badRequest(.malformedJSON, "the body is not JSON")
        }
        priority = decoded.priority
        preview = decoded.preview
        inline = decoded.inline
        cancelOffscreen = decoded.cancelOffscreen
        thumbnailQuery = ThumbnailParameters.names.compactMap { name in decoded.parameters[name].map { (name, $0) } }
        parameters = decoded.parameters
        itemParameters = decoded.itemParameters
        itemSignatures = decoded.itemSignatures
        thumbnail = try ThumbnailParameters({ decoded.parameters[$0] }, presets: presets)
        guard let items = decoded.items else { throw .badRequest(.noItems, "the body needs items (or urls)") }
        guard !items.isEmpty else { throw .badRequest(.noItems, "the batch has no items") }
        guard items.count <= maxItems else {
            throw ThumbdError(.tooManyItems, "a batch holds at most \(maxItems) items")
        }
        self.items = items
        focus = try Self.indices(decoded.focus, of: items.count, "focus")
    }

    /// The body of `POST /batches/<id>/items`: more items for a running batch, in the
    /// shape of `POST /batches`'s (`items` or `urls`, each item with its own parameters and
    /// `sig`), and `focus`: which of *these* are on screen now. What applies to every item
    /// (the thumbnail parameters, `priority`, `preview`, `inline`, `cancelOffscreen`) was
    /// fixed when the batch was created, so naming it here is refused rather than ignored.
    static func added(body: Bytes, maxItems: Int, presets: Presets = Presets()) throws(ThumbdError) -> BatchRequest {
        let fixed = Set(ParameterNames.batch).subtracting(["items", "urls", "focus"])
        if let object = try? JSONSerialization.jsonObject(with: Data(body.array)) as? [String: Any],
           let name = object.keys.sorted().first(where: fixed.contains) {
            throw .badRequest(.badParameter,
                              "\(name) applies to the whole batch and was set when it was created; this route takes items (or urls) and focus")
        }
        return try BatchRequest(body: body, maxItems: maxItems, presets: presets)
    }

    /// This batch with `added`'s items after its own (their indices follow on).
    mutating func append(_ added: BatchRequest) {
        itemParameters += Array(repeating: [:], count: max(0, items.count - itemParameters.count))
        itemSignatures += Array(repeating: nil, count: max(0, items.count - itemSignatures.count))
        items += added.items
        itemParameters += added.items.indices.map { $0 < added.itemParameters.count ? added.itemParameters[$0] : [:] }
        itemSignatures += added.items.indices.map { $0 < added.itemSignatures.count ? added.itemSignatures[$0] : nil }
    }

    /// The body of `POST /batches/<id>/focus`: the object `{"items": [indices]}`, checked
    /// against the batch's `count` items. Anything else (a bare list, `{}`) is refused.
    static func focus(body: Bytes, of count: Int) throws(ThumbdError) -> [Int] {
        struct Focus: Decodable { var items: [Int] }
        guard let focus = try? JSONDecoder().decode(Focus.self, from: Data(body.array)) else {
            throw .badRequest(.malformedJSON, "the body must be the object {\"items\": [item indices]}")
        }
        return try indices(focus.items, of: count, "items")
    }

    /// `"focus"`'s indices, checked against the batch's items (duplicates dropped, order kept).
    static func indices(_ indices: [Int], of count: Int, _ name: String) throws(ThumbdError) -> [Int] {
        if let wrong = indices.first(where: { !(0..<count).contains($0) }) {
            throw .badRequest(.badParameter, "\(name) names item \(wrong); the batch has items 0 to \(count - 1)")
        }
        var seen = Set<Int>()
        return indices.filter { seen.insert($0).inserted }
    }

    private struct Body: Decodable {
        var items: [(clientID: String?, url: String)]?
        var itemParameters: [[String: String]] = []
        var itemSignatures: [String?] = []
        var priority = Priority.normal
        var parameters: [String: String] = [:]
        var preview = false
        var inline = false
        var focus: [Int] = []
        var cancelOffscreen = false

        enum Key: String, CodingKey { case items, urls, priority, preview, inline, focus, cancelOffscreen }

        init(from decoder: any Decoder) throws {
            let names = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)
            try ParameterNames.check(names, known: ParameterNames.batch)
            let object = try decoder.container(keyedBy: Key.self)
            // Numbers, strings or flags ("w": 64 or "w": "64"); anything else is a bad parameter.
            let any = try decoder.container(keyedBy: AnyKey.self)
            for name in ThumbnailParameters.names {
                let key = AnyKey(stringValue: name)
                guard any.contains(key) else { continue }
                guard let text = BatchRequest.textOf(any, key) else {
                    throw ThumbdError.badRequest(.badParameter, "\(name) must be a number or a string")
                }
                parameters[name] = text
            }
            // true or false; absent: false; anything else refuses the batch.
            func flag(_ key: Key) throws -> Bool {
                guard object.contains(key) else { return false }
                guard let flag = try? object.decode(Bool.self, forKey: key) else {
                    throw ThumbdError.badRequest(.badParameter, "\(key.rawValue) must be true or false")
                }
                return flag
            }
            preview = try flag(.preview)
            inline = try flag(.inline)
            cancelOffscreen = try flag(.cancelOffscreen)
            if object.contains(.focus) {
                guard let indices = try? object.decode([Int].self, forKey: .focus) else {
                    throw ThumbdError.badRequest(.badParameter, "focus must be a list of item indices")
                }
                focus = indices
            }
            if object.contains(.priority) {
                guard let text = try? object.decode(String.self, forKey: .priority), let priority = Priority(parameter: text) else {
                    throw ThumbdError.badRequest(.badParameter, "priority must be high, normal or low")
                }
                self.priority = priority
            }
            if object.contains(.items) {
                let decoded = try object.decode([Item].self, forKey: .items)
                items = decoded.map { ($0.id, $0.url) }
                itemParameters = decoded.map(\.parameters)
                itemSignatures = decoded.map(\.sig)
            } else if object.contains(.urls) {
                items = try object.decode([Lenient<String>].self, forKey: .urls).map { (nil, $0.value ?? "") }
                itemParameters = Array(repeating: [:], count: items?.count ?? 0)
                itemSignatures = Array(repeating: nil, count: items?.count ?? 0)
            }
        }
    }

    /// A thumbnail parameter as the query would spell it: a number, a string, or a flag (1 or 0).
    fileprivate static func textOf(_ container: KeyedDecodingContainer<AnyKey>, _ key: AnyKey) -> String? {
        if let number = try? container.decode(Int.self, forKey: key) { return String(number) }
        if let number = try? container.decode(Double.self, forKey: key) { return String(number) }
        if let text = try? container.decode(String.self, forKey: key) { return text }
        if let flag = try? container.decode(Bool.self, forKey: key) { return flag ? "1" : "0" }
        return nil
    }

    /// `{"url": "...", "id": "..."}`; anything else is an item without a URL. A numeric id is
    /// kept as its text.
    private struct Item: Decodable {
        var url = ""
        var id: String?
        var sig: String?
        /// This item's own thumbnail parameters; a value of the wrong type is kept as text
        /// that fails validation, so only this item fails.
        var parameters: [String: String] = [:]

        enum Key: String, CodingKey { case url, id, sig }

        init(from decoder: any Decoder) throws {
            guard let object = try? decoder.container(keyedBy: Key.self) else { return }
            // An unknown key fails this item alone: it is kept with the item's parameters, whose
            // check refuses it.
            for name in (try? decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue)) ?? []
            where !ParameterNames.batchItem.contains(name) {
                parameters[name] = ""
            }
            url = (try? object.decode(String.self, forKey: .url)) ?? ""
            sig = try? object.decode(String.self, forKey: .sig)
            if let any = try? decoder.container(keyedBy: AnyKey.self) {
                for name in ThumbnailParameters.names where any.contains(AnyKey(stringValue: name)) {
                    parameters[name] = BatchRequest.textOf(any, AnyKey(stringValue: name)) ?? "(not a number or a string)"
                }
            }
            if let text = try? object.decode(String.self, forKey: .id) {
                id = text
            } else if let number = try? object.decode(Double.self, forKey: .id) {
                id = number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
            }
        }
    }

    /// Any key of a JSON object, to list them all.
    fileprivate struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    /// A value of type T, or nil when the element is something else.
    private struct Lenient<T: Decodable>: Decodable {
        var value: T?
        init(from decoder: any Decoder) throws {
            value = try? decoder.singleValueContainer().decode(T.self)
        }
    }
}
