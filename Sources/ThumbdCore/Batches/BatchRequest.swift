import Foundation

/// A parsed `POST /batches` body: `{"items": [{"url", "id"}], "priority", …}` or
/// `{"urls": [...]}`. Only the request as a whole can be refused here (malformed JSON, no
/// items, too many); a bad URL becomes that item's `failed` event later.
struct BatchRequest {
    var items: [(clientID: String?, url: String)]
    var priority: Priority

    init(body: Bytes, maxItems: Int) throws(ThumbdError) {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(body.array))
        } catch {
            throw .badRequest(.malformedJSON, "the body is not JSON: \(error.localizedDescription)")
        }
        guard let object = parsed as? [String: Any] else {
            throw .badRequest(.malformedJSON, "the body must be a JSON object")
        }
        if let name = ThumbRequest.thumbnailParameters.first(where: { object[$0] != nil }) {
            throw .badRequest(.unsupportedParameter, "\(name): resizing (w, h, fit, format, q) is not available yet")
        }
        if let text = object["priority"] {
            guard let text = text as? String, let priority = Priority(parameter: text) else {
                throw .badRequest(.badParameter, "priority must be high, normal or low")
            }
            self.priority = priority
        } else {
            self.priority = .normal
        }
        if let list = object["items"] {
            guard let list = list as? [Any] else { throw .badRequest(.malformedJSON, "items must be an array") }
            items = list.map { entry in
                let item = entry as? [String: Any] ?? [:]
                let id: String? = switch item["id"] {
                case let text as String: text
                case let number as NSNumber: number.stringValue
                default: nil
                }
                return (id, item["url"] as? String ?? "")
            }
        } else if let list = object["urls"] {
            guard let list = list as? [Any] else { throw .badRequest(.malformedJSON, "urls must be an array") }
            items = list.map { (nil, $0 as? String ?? "") }
        } else {
            throw .badRequest(.noItems, "the body needs items (or urls)")
        }
        guard !items.isEmpty else { throw .badRequest(.noItems, "the batch has no items") }
        guard items.count <= maxItems else {
            throw ThumbdError(.tooManyItems, "a batch holds at most \(maxItems) items")
        }
    }
}
