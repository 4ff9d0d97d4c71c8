/// A setting that is present but unusable. Start-up stops with this message rather than
/// silently running with a value the operator did not ask for.
package struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    package let key: String
    package let reason: String
    package init(key: String, reason: String) {
        self.key = key
        self.reason = reason
    }
    package var description: String { "invalid setting \(key): \(reason)" }
}

func require(_ condition: Bool, _ key: String, _ reason: @autoclosure () -> String) throws {
    if !condition { throw ConfigurationError(key: key, reason: reason()) }
}
