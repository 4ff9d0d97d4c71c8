import Testing
import HTTPServer

/// A request's query or headers: the first occurrence of a name wins, as the dictionary it
/// replaced kept it; lookups by exact name.
@Suite("Fields")
struct FieldsTests {
    @Test("the first occurrence of a name is kept, and names are looked up exactly")
    func firstWins() {
        var fields = Fields()
        fields.add("url", "https://a.example/1.jpg")
        fields.add("w", "100")
        fields.add("url", "https://b.example/2.jpg")
        #expect(fields["url"] == "https://a.example/1.jpg")
        #expect(fields["w"] == "100")
        #expect(fields["W"] == nil)
        #expect(fields["h"] == nil)
        #expect(fields.count == 2)
        #expect(fields.keys == ["url", "w"])
        #expect(!fields.isEmpty && Fields().isEmpty)
    }

    @Test("a literal keeps the first of a repeated name, in order")
    func literal() {
        let fields: Fields = ["a": "1", "b": "2"]
        #expect(fields.map(\.name) == ["a", "b"])
        #expect(Fields(["x": "9"])["x"] == "9")
    }
}
