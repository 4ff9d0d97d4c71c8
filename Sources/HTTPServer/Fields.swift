/// A request's query arguments, or the headers its handler reads: a few name–value pairs in
/// arrival order, the first occurrence of a name kept. A lookup is a scan comparing names,
/// not a hash: a request carries a handful (a hit names `url` alone, and a browser sends
/// a few of the headers a handler reads), and a dictionary hashed every name it stored and
/// every name it was asked, with a random seed each time (a visible share of a hit's CPU).
/// The server bounds how many a request may carry (`maxQueryParameters`).
public struct Fields: Sendable, ExpressibleByDictionaryLiteral, Sequence {
    public typealias Element = (name: String, value: String)
    /// A struct, not the tuple `Element`: an array of tuples is destroyed through the
    /// runtime's generic tuple witness, element by element (every request frees two).
    fileprivate struct Pair: Sendable {
        let name: String
        let value: String
    }
    private var pairs: [Pair]

    public init() { pairs = [] }

    public init(dictionaryLiteral elements: (String, String)...) {
        pairs = []
        for (name, value) in elements { add(name, value) }
    }

    public init(_ dictionary: [String: String]) {
        pairs = dictionary.map { Pair(name: $0.key, value: $0.value) }
    }

    public subscript(name: String) -> String? {
        for pair in pairs where pair.name == name { return pair.value }
        return nil
    }

    /// Adds a pair unless the name is there already: the first occurrence wins.
    public mutating func add(_ name: String, _ value: String) {
        if self[name] == nil { pairs.append(Pair(name: name, value: value)) }
    }

    public var count: Int { pairs.count }
    public var isEmpty: Bool { pairs.isEmpty }
    public var keys: [String] { pairs.map(\.name) }

    public func makeIterator() -> Iterator { Iterator(pairs: pairs.makeIterator()) }

    public struct Iterator: IteratorProtocol {
        fileprivate var pairs: IndexingIterator<[Pair]>

        public mutating func next() -> Element? { pairs.next().map { ($0.name, $0.value) } }
    }
}
