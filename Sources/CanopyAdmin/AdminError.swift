/// Error codes of the admin protocol (Protocol/admin-v1.md §4). Stable strings: scripts match them.
public enum AdminErrorCode: String, Sendable, Equatable, CaseIterable {
    /// The line is not JSON.
    case parseError = "parse_error"
    /// The line is JSON but not a request object with an integer `id` and a string `cmd`.
    case invalidRequest = "invalid_request"
    /// `cmd` names no command.
    case unknownCommand = "unknown_command"
    /// An argument is missing, of the wrong type, or out of range.
    case invalidArgument = "invalid_argument"
    /// The line exceeded `AgentLimits.adminLineBytesMax`; the connection is closed after this.
    case lineTooLong = "line_too_long"
    /// A write named a revision that is not the current one.
    case conflict
    /// The document, revision or peer does not exist.
    case notFound = "not_found"
    /// `resolve` named a document that has no conflict.
    case notConflicted = "not_conflicted"
    /// The command needs something this agent does not have (yet), e.g. replication.
    case unavailable
    /// The request was valid but carrying it out failed.
    case failed
    /// No slot for the client (`AdminClientSlots`): sent once, with a null `id`, to a client
    /// connecting when every slot is held by a busy client, or to an idle client closed to make
    /// room for a newcomer; or, its `id` echoed, to a command an operator slot does not serve.
    /// The connection is closed after it.
    case busy
}

/// An error response's content.
public struct AdminFailure: Error, Sendable, Equatable {
    /// The stable code.
    public var code: AdminErrorCode
    /// A human-readable explanation.
    public var message: String

    /// Creates a failure.
    public init(_ code: AdminErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }
}

extension AdminErrorCode: Codable {}

extension AdminFailure: Codable {
    private enum CodingKeys: String, CodingKey { case code, message }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        // A code this client does not know yet (a newer agent's) is `failed`, the code kept in
        // the message.
        let text = try container.decode(String.self, forKey: .code)
        let message = try container.decode(String.self, forKey: .message)
        guard let code = AdminErrorCode(rawValue: text) else {
            self.init(.failed, "\(text): \(message)")
            return
        }
        self.init(code, message)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(code, forKey: .code)
        try container.encode(message, forKey: .message)
    }
}

extension AdminFailure: CustomStringConvertible {
    public var description: String { "\(code.rawValue): \(message)" }
}
