import CanopyCore
import CanopyStore

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

/// Content an upload stored: its digest and length, and the pin that keeps compaction from
/// removing it until the revision naming it has committed (released with the request).
package struct UploadedContent: Sendable, Equatable {
    package var digest: AttachmentDigest
    package var length: Int64
    package var pin: AttachmentPin?

    package init(digest: AttachmentDigest, length: Int64, pin: AttachmentPin? = nil) {
        self.digest = digest
        self.length = length
        self.pin = pin
    }

    /// The same content; the pins are not compared.
    package static func == (left: UploadedContent, right: UploadedContent) -> Bool {
        left.digest == right.digest && left.length == right.length
    }
}

/// A line that is not a valid request: the error and the request id if one could be read (so the
/// error response can still echo it).
package struct AdminDecodeFailure: Error, Sendable, Equatable {
    /// The request's `id`, or nil when the line has none.
    public var id: Int64?
    /// What is wrong.
    public var failure: AdminFailure
}

/// One decoded request line: `{"id":N,"cmd":"…", …arguments}`. Arguments are the other members of
/// the object (flat, so `{"id":1,"cmd":"get","doc":"a"}` rather than a nested `args` object:
/// shorter to type with `socat`, and every command's argument names are distinct from `id`/`cmd`).
package struct AdminRequest: Sendable, Equatable {
    /// The client's request id, echoed in the response. Any integer; the agent does not require
    /// uniqueness (clients use it to match responses when they pipeline).
    public var id: Int64
    /// The command name.
    public var command: String
    /// All members except `id` and `cmd`.
    public var arguments: [String: JSONValue]
    /// For an upload (`attach`), what its bytes were stored as; set by the connection once they
    /// all arrived, never read from the line.
    package var uploaded: UploadedContent?

    /// Creates a request.
    public init(id: Int64, command: String, arguments: [String: JSONValue] = [:]) {
        self.id = id
        self.command = command
        self.arguments = arguments
    }

    /// Decodes one line (without its newline). On failure returns the error and the request id
    /// if one could be read (null otherwise), so the error response can still echo it.
    public static func decode(_ line: some Collection<UInt8>) -> Result<AdminRequest, AdminDecodeFailure> {
        let value: JSONValue
        let problem: JSONError?
        do {
            (value, problem) = try JSONValue.parseInputReportingProblem(Array(line))
        } catch {
            return .failure(AdminDecodeFailure(id: nil, failure: AdminFailure(.parseError, "request is not valid JSON: \(error)")))
        }
        guard case .object(var members) = value else {
            return .failure(AdminDecodeFailure(id: nil, failure: AdminFailure(.invalidRequest, "request must be a JSON object")))
        }
        guard case .int(let id)? = members.removeValue(forKey: "id") else {
            return .failure(AdminDecodeFailure(id: nil, failure: AdminFailure(.invalidRequest, "request needs an integer \"id\"")))
        }
        // Well-formed JSON whose content would be changed on storing (a duplicate member name,
        // a number that does not fit): the request is refused as a whole, naming the problem.
        if let problem {
            return .failure(AdminDecodeFailure(id: id, failure: AdminFailure(.invalidArgument, problem.description)))
        }
        guard case .string(let command)? = members.removeValue(forKey: "cmd") else {
            return .failure(AdminDecodeFailure(id: id, failure: AdminFailure(.invalidRequest, "request needs a string \"cmd\"")))
        }
        return .success(AdminRequest(id: id, command: command, arguments: members))
    }

    // MARK: Typed arguments. Each throws `invalidArgument` naming the argument and the type wanted.

    /// A required string argument.
    public func string(_ name: String) throws(AdminFailure) -> String {
        guard let value = try optionalString(name) else { throw missing(name, "a string") }
        return value
    }

    /// An optional string argument (absent or null → nil).
    public func optionalString(_ name: String) throws(AdminFailure) -> String? {
        switch arguments[name] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        default: throw wrongType(name, "a string")
        }
    }

    /// An optional integer argument within `range`.
    public func optionalInt(_ name: String, in range: ClosedRange<Int64>) throws(AdminFailure) -> Int64? {
        switch arguments[name] {
        case nil, .null?: return nil
        case .int(let number)?:
            guard range.contains(number) else {
                throw AdminFailure(.invalidArgument, "\"\(name)\" must be from \(range.lowerBound) to \(range.upperBound)")
            }
            return number
        default: throw wrongType(name, "an integer")
        }
    }

    /// An optional boolean argument (absent → `defaultValue`).
    public func bool(_ name: String, default defaultValue: Bool = false) throws(AdminFailure) -> Bool {
        switch arguments[name] {
        case nil, .null?: return defaultValue
        case .bool(let flag)?: return flag
        default: throw wrongType(name, "true or false")
        }
    }

    /// A required JSON object argument (a document body).
    public func object(_ name: String) throws(AdminFailure) -> JSONValue {
        switch arguments[name] {
        case nil, .null?: throw missing(name, "a JSON object")
        case .object(let members)?: return .object(members)
        default: throw wrongType(name, "a JSON object")
        }
    }

    /// An optional revision id argument.
    public func optionalRevision(_ name: String) throws(AdminFailure) -> RevisionID? {
        guard let text = try optionalString(name) else { return nil }
        guard let revision = RevisionID(text) else {
            throw AdminFailure(.invalidArgument, "\"\(name)\" is not a revision id (N-<32 hex>): \"\(text.prefix(80))\"")
        }
        return revision
    }

    /// A required revision id argument.
    public func revision(_ name: String) throws(AdminFailure) -> RevisionID {
        guard let revision = try optionalRevision(name) else { throw missing(name, "a revision id") }
        return revision
    }

    /// A required argument that must be one of an enum's raw values.
    public func choice<T: RawRepresentable & CaseIterable>(_ name: String, _ type: T.Type, default defaultValue: T? = nil) throws(AdminFailure) -> T where T.RawValue == String {
        guard let text = try optionalString(name) else {
            if let defaultValue { return defaultValue }
            throw missing(name, "one of " + T.allCases.map(\.rawValue).joined(separator: ", "))
        }
        guard let value = T(rawValue: text) else {
            throw AdminFailure(.invalidArgument, "\"\(name)\" must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    private func missing(_ name: String, _ type: String) -> AdminFailure {
        AdminFailure(.invalidArgument, "\"\(command)\" needs \"\(name)\": \(type)")
    }

    private func wrongType(_ name: String, _ type: String) -> AdminFailure {
        AdminFailure(.invalidArgument, "\"\(name)\" must be \(type)")
    }
}

/// Builds response lines. Every response is one line of canonical JSON (keys sorted, so output is
/// byte-for-byte reproducible in tests) terminated by `\n`.
package enum AdminResponse {
    /// `{"id":N,"ok":true, …result}`: the result's members are merged at the top level.
    public static func success(id: Int64, _ result: [String: JSONValue] = [:]) -> [UInt8] {
        var members = result
        members["id"] = .int(id)
        members["ok"] = .bool(true)
        return line(.object(members))
    }

    /// `{"id":N|null,"ok":false,"error":{"code":"…","message":"…"}}`.
    public static func failure(id: Int64?, _ failure: AdminFailure) -> [UInt8] {
        line(.object([
            "id": id.map(JSONValue.int) ?? .null,
            "ok": .bool(false),
            "error": .object(["code": .string(failure.code.rawValue), "message": .string(failure.message)]),
        ]))
    }

    /// One streamed event line: `{"event":{…}}` (events carry no request id; see admin-v1.md §5).
    public static func line(_ value: JSONValue) -> [UInt8] {
        var bytes = CanonicalJSON.encode(value)
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }
}
