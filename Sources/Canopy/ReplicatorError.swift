/// Why a replicator failed or a `Replicator.sync()` did not complete.
public struct ReplicatorError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Machine-readable: `invalid_configuration` (a malformed peer id or address),
    /// `config_failed` (the node could not write or apply the peer's entry), `protocol` (the
    /// peer broke the replication protocol; the replicator does not retry), or the agent's sync
    /// failure codes: `unknown_peer` (the peer's entry was removed meanwhile), `failed` (the
    /// replicator was stopped while a sync waited, or the session failed for good).
    public var code: String
    /// For people.
    public var message: String

    /// Creates an error.
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
