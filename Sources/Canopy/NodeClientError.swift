import CanopyAdmin
import CanopyAgent

/// What went wrong in a ``NodeClient`` call.
public enum NodeClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No agent accepted a connection at `path`: no socket file there, or nothing listening on
    /// it (the agent is not running), or no permission to connect. `detail` is the system's word.
    case cannotConnect(path: String, detail: String)
    /// The agent answered with an error (Protocol/admin-v1.md §4). `code` is the protocol's code:
    /// `conflict` (a stale revision), `not_found`, `invalid_argument`, `not_conflicted`,
    /// `unavailable`, `failed`, `busy` (the agent serves as many clients as it allows), and the
    /// request-level `parse_error`, `invalid_request`, `unknown_command`, `line_too_long`.
    /// `message` is the agent's explanation.
    case agent(code: String, message: String)
    /// The connection to the agent at `path` ended before the response came (the agent stopped
    /// or closed it). The next request connects again.
    case connectionLost(path: String, detail: String)
    /// The agent sent something this client does not understand.
    case unexpectedResponse(String)
    /// A value could not be encoded as a document body, or a body could not be decoded as the
    /// type asked for (`DatabaseError.encodingFailed`, `.invalidDocument` or `.decodingFailed`).
    case coding(DatabaseError)
    /// An ``NodeClient/events(since:)`` stream held `buffered` events its reader had not taken
    /// and ended instead of holding more; `lastDelivered` is the sequence of the last event it
    /// holds (the reader still gets those). `events(since: lastDelivered)` resumes where it
    /// stopped, from the agent's own buffer.
    case readerTooSlow(buffered: Int, lastDelivered: Int64)

    /// The protocol's error code when the agent answered with an error, otherwise nil.
    public var code: String? {
        if case .agent(let code, _) = self { return code }
        return nil
    }

    /// One line saying what happened.
    public var description: String {
        switch self {
        case .cannotConnect(let path, let detail): return "cannot connect: no agent at \(path) (\(detail))"
        case .agent(let code, let message): return "\(code): \(message)"
        case .connectionLost(let path, let detail): return "the connection to the agent at \(path) was lost: \(detail)"
        case .unexpectedResponse(let detail): return "unexpected response from the agent: \(detail)"
        case .coding(let error): return error.description
        case .readerTooSlow(let buffered, let last):
            return "the event stream ended: \(buffered) events were waiting to be read; resume with events(since: \(last))"
        }
    }

    /// The client's error for a socket failure talking to the agent at `path`.
    init(_ error: AdminSocketClient.ClientError, path: String) {
        switch error {
        case .unreachable(_, let detail): self = .cannotConnect(path: path, detail: detail)
        case .closed, .timedOut: self = .connectionLost(path: path, detail: error.description)
        case .badResponse(let detail): self = .unexpectedResponse(detail)
        }
    }

    /// Whether the connection is of no further use after this error: the agent closed it, or
    /// closes it after this response (`busy`, `line_too_long`), or the stream lost its framing.
    var closesConnection: Bool {
        switch self {
        case .connectionLost, .unexpectedResponse, .cannotConnect: return true
        case .agent(let code, _): return code == AdminErrorCode.busy.rawValue || code == AdminErrorCode.lineTooLong.rawValue
        case .coding, .readerTooSlow: return false
        }
    }
}
