import Foundation

/// Named sets of thumbnail parameters (`thumbnails.presets`), asked for by `preset=NAME`;
/// with `thumbnails.onlyPresets`, the only way to ask for a thumbnail, so that a page cannot
/// mint unbounded variants of an image (imgproxy's `ONLY_PRESETS`). An original (no
/// thumbnail parameter at all) is still served.
struct Presets: Sendable, Equatable {
    /// Each preset's parameters, by the query's names (`w`, `fit`, …).
    var named: [String: [String: String]] = [:]
    /// `thumbnails.onlyPresets`.
    var only = false

    /// The parameters of the preset a request names (empty when it names none). Refuses an
    /// unknown preset, and, with `only`, any other thumbnail parameter.
    func resolve(_ request: (String) -> String?) throws(ThumbdError) -> [String: String] {
        if only {
            for name in ThumbnailParameters.names where name != "preset" {
                guard let value = request(name), !value.isEmpty else { continue }
                throw .badRequest(.badParameter, "\(name) is not taken here: this thumbd makes presets only "
                                      + "(thumbnails.onlyPresets); ask for preset=NAME, one of \(list)")
            }
        }
        guard let name = request("preset"), !name.isEmpty else { return [:] }
        guard let values = named[name] else {
            throw .badRequest(.badParameter, named.isEmpty
                ? "preset=\(name): no presets are configured (thumbnails.presets)"
                : "preset must be one of \(list), not \(name)")
        }
        return values
    }

    private var list: String { named.keys.sorted().joined(separator: ", ") }

    /// Parses `thumbnails.presets`: a JSON object of objects, `{"avatar": {"w": 128, "h": 128,
    /// "fit": "cover"}}`. Each preset's values are checked as a request's would be.
    static func parse(json text: String) throws -> [String: [String: String]] {
        let key = "thumbnails.presets"
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw ConfigurationError(key: key, reason: "must be a JSON object of presets, as {\"avatar\": {\"w\": 128, \"h\": 128}}")
        }
        var presets: [String: [String: String]] = [:]
        for (name, body) in object {
            guard name.wholeMatch(of: /[A-Za-z0-9_-]{1,64}/) != nil else {
                throw ConfigurationError(key: key, reason: "\(name) is not a preset name (letters, digits, _ and -, at most 64)")
            }
            guard let parameters = body as? [String: Any] else {
                throw ConfigurationError(key: "\(key).\(name)", reason: "must be an object of thumbnail parameters")
            }
            var values: [String: String] = [:]
            for (parameter, value) in parameters {
                guard ThumbnailParameters.names.contains(parameter), parameter != "preset" else {
                    throw ConfigurationError(key: "\(key).\(name)", reason: "\(parameter) is not a thumbnail parameter")
                }
                switch value {
                case let flag as Bool: values[parameter] = flag ? "1" : "0"
                case let text as String: values[parameter] = text
                case let number as NSNumber: values[parameter] = number.stringValue
                default: throw ConfigurationError(key: "\(key).\(name).\(parameter)", reason: "must be a number or a string")
                }
            }
            do {
                guard try ThumbnailParameters({ values[$0] }) != nil else {
                    throw ConfigurationError(key: "\(key).\(name)", reason: "names no thumbnail parameter")
                }
            } catch let error as ThumbdError {
                throw ConfigurationError(key: "\(key).\(name)", reason: error.message)
            }
            presets[name] = values
        }
        return presets
    }
}
