import CanopyCore
import CanopyReplication

/// One admin command (Protocol/admin-v1.md §6): its arguments are the type's members, `Reply` is
/// what a success carries. A request line is `{"id":N,"cmd":name, …members}`; a success is
/// `{"id":N,"ok":true, …reply members}`.
///
/// The agent decodes a request line into the command's type (`AdminRequestLine.command(as:)`),
/// and a client encodes one (`AdminRequestLine.encode(_:id:)`); the library runs the same
/// handlers in its process with the same values and no JSON at all.
public protocol AdminCommand: Codable, Sendable {
    /// What a success carries.
    associatedtype Reply: Codable, Sendable
    /// The `cmd` of the request line.
    static var name: String { get }
    /// Checks what the types do not say (a number's range); the agent calls it before the
    /// command runs. Throws `invalid_argument`.
    func validate() throws(AdminFailure)
}

extension AdminCommand {
    public func validate() throws(AdminFailure) {}

    /// Refuses `value` of the argument `name` outside `range` (`invalid_argument`); nil passes.
    public func check(_ name: String, _ value: Int64?, in range: ClosedRange<Int64>) throws(AdminFailure) {
        guard let value, !range.contains(value) else { return }
        throw AdminFailure(.invalidArgument, "\"\(name)\" must be from \(range.lowerBound) to \(range.upperBound)")
    }
}

/// A reply that carries no members beyond `id` and `ok`.
public struct AdminNoReply: Codable, Sendable, Equatable {
    /// Creates it.
    public init() {}
}

/// A string-valued choice of the protocol (`direction`, `mode`, `access`): `JSONValueDecoder`
/// reads it only from one of its names, and a refusal lists them. String-backed enums conform by
/// declaring it (their raw values are the names), engine types too.
public protocol AdminChoice: Codable, Sendable, AdminValueDescribing {
    /// Every name, in the order a refusal lists them.
    static var choiceNames: [String] { get }
    /// The choice `name` names, or nil.
    init?(choiceName name: String)
}

extension AdminChoice {
    public static var valueDescription: String { "one of " + choiceNames.joined(separator: ", ") }
}

extension AdminChoice where Self: RawRepresentable & CaseIterable, RawValue == String {
    public static var choiceNames: [String] { allCases.map(\.rawValue) }

    public init?(choiceName name: String) { self.init(rawValue: name) }
}

extension ReplicationDirection: AdminChoice {}
extension ReplicatorState: AdminChoice {}
extension ReplicationMode: AdminChoice {}

/// A line that is not a valid request: the error, and the request's id when one could be read
/// (so that the error response can still echo it).
public struct AdminDecodeFailure: Error, Sendable, Equatable {
    /// The request's `id`, or nil when the line has none.
    public var id: Int64?
    /// What is wrong.
    public var failure: AdminFailure

    /// Creates a failure.
    public init(id: Int64?, failure: AdminFailure) {
        self.id = id
        self.failure = failure
    }
}

/// One request line, read: its id, its command's name and the arguments (every other member,
/// flat, so `{"id":1,"cmd":"get","doc":"a"}` rather than a nested `args` object: shorter to type
/// with `socat`, and no command has an argument named `id` or `cmd`).
public struct AdminRequestLine: Sendable, Equatable {
    /// The client's request id, echoed in the response. Any integer; the agent does not require
    /// uniqueness (clients use it to match responses when they pipeline).
    public var id: Int64
    /// The command's name.
    public var command: String
    /// Every member but `id` and `cmd`.
    public var arguments: [String: JSONValue]

    /// Creates a request line.
    public init(id: Int64, command: String, arguments: [String: JSONValue] = [:]) {
        self.id = id
        self.command = command
        self.arguments = arguments
    }

    /// Reads one line (without its newline) as user input (`canonical-json.md` §1). On failure,
    /// the error and the request's id when one could be read.
    public static func decode(_ line: some Collection<UInt8>) -> Result<AdminRequestLine, AdminDecodeFailure> {
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
        return .success(AdminRequestLine(id: id, command: command, arguments: members))
    }

    /// The arguments as `C`, checked (`AdminCommand.validate`). A missing or mistyped argument is
    /// `invalid_argument` naming it and what it must be.
    public func command<C: AdminCommand>(as type: C.Type) throws(AdminFailure) -> C {
        let command: C
        do {
            command = try JSONValueDecoder().decode(C.self, from: .object(arguments))
        } catch {
            throw Self.refusal(of: error, in: self.command)
        }
        try command.validate()
        return command
    }

    /// A decoding error as the `invalid_argument` it is.
    public static func refusal(of error: JSONValueDecodingError, in command: String) -> AdminFailure {
        switch error.problem {
        case .missing(let expected): return AdminFailure(.invalidArgument, "\"\(command)\" needs \"\(error.path)\": \(expected)")
        case .wrongType, .invalid: return AdminFailure(.invalidArgument, error.description)
        }
    }

    /// `command`'s request line with `id`, canonical JSON without its newline.
    public static func encode<C: AdminCommand>(_ command: C, id: Int64) -> [UInt8] {
        AdminRequestLine(id: id, command: C.name, arguments: encodeArguments(command)).encoded()
    }

    /// What a logged request names (`db=… doc=…`): the string arguments that say what it acts
    /// on, each cut to 80 characters.
    public var loggedTarget: String {
        ["db", "name", "doc", "node_id", "path"].compactMap { key -> String? in
            if case .string(let value)? = arguments[key] { return "\(key)=\(value.prefix(80))" }
            return nil
        }.joined(separator: " ")
    }

    /// The line as canonical JSON, without its newline.
    public func encoded() -> [UInt8] {
        var members = arguments
        members["id"] = .int(id)
        members["cmd"] = .string(command)
        return CanonicalJSON.encode(.object(members))
    }

    /// `command`'s arguments as members. Every command's members are strings, numbers, flags
    /// and JSON values, which always encode.
    public static func encodeArguments<C: AdminCommand>(_ command: C) -> [String: JSONValue] {
        do {
            return try JSONValueEncoder().encodeMembers(command)
        } catch {
            preconditionFailure("\(C.name)'s arguments do not encode: \(error)")
        }
    }
}

/// Response and stream lines. Every line is one line of canonical JSON (keys sorted, so output is
/// byte-for-byte reproducible in tests) ending in `\n`.
public enum AdminResponseLine {
    /// `{"id":N,"ok":true, …reply}`: the reply's members at the top level.
    public static func success(id: Int64, _ members: [String: JSONValue] = [:]) -> [UInt8] {
        var members = members
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

    /// One line: `value` as canonical JSON and a newline.
    public static func line(_ value: JSONValue) -> [UInt8] {
        var bytes = CanonicalJSON.encode(value)
        bytes.append(UInt8(ascii: "\n"))
        return bytes
    }

    /// A reply's members (`failed` when the reply does not encode as an object: a bug of the
    /// agent's, said in the reply rather than crashing the agent).
    public static func members<R: Encodable>(of reply: R) -> Result<[String: JSONValue], AdminFailure> {
        do {
            return .success(try JSONValueEncoder().encodeMembers(reply))
        } catch {
            return .failure(AdminFailure(.failed, "the reply does not encode: \(error)"))
        }
    }

    /// A response object read by a client, as `C`'s reply or the agent's error. A success whose
    /// members do not fit the reply is `failed`, naming the member (an agent of another version).
    public static func reply<C: AdminCommand>(to type: C.Type, from members: [String: JSONValue]) -> Result<C.Reply, AdminFailure> {
        if members["ok"] != .bool(true) {
            guard let failure = failure(in: members) else {
                return .failure(AdminFailure(.failed, "the agent answered \(C.name) with neither a result nor an error"))
            }
            return .failure(failure)
        }
        var members = members
        members["id"] = nil
        members["ok"] = nil
        do {
            return .success(try JSONValueDecoder().decode(C.Reply.self, from: .object(members)))
        } catch {
            return .failure(AdminFailure(.failed, "the agent's reply to \(C.name) does not fit this client: \(error)"))
        }
    }
}

/// The line that tells a client to send an upload's bytes, `{"upload":{"id":N,"length":L}}`
/// (Protocol/admin-v1.md §2): sent as soon as the upload's line was read and accepted.
public struct AdminUploadGrant: Codable, Sendable, Equatable {
    /// The upload request's id.
    public var id: Int64
    /// The bytes the client sends now.
    public var length: Int64

    /// Creates a grant.
    public init(id: Int64, length: Int64) {
        self.id = id
        self.length = length
    }

    /// Reads a line's object as a grant; nil when it is another kind of line.
    public init?(line members: [String: JSONValue]) {
        guard case .object(let upload)? = members["upload"], case .int(let id)? = upload["id"], case .int(let length)? = upload["length"] else {
            return nil
        }
        self.init(id: id, length: length)
    }

    /// The line, with its newline.
    public var line: [UInt8] {
        AdminResponseLine.line(.object(["upload": .object(["id": .int(id), "length": .int(length)])]))
    }
}

extension AdminResponseLine {
    /// The `id` a response object answers: nil for a line that is not a response (an event, an
    /// offer, an upload grant) and for the `busy` refusal, whose id is null.
    public static func responseID(of members: [String: JSONValue]) -> Int64? {
        guard members["ok"] != nil, case .int(let id)? = members["id"] else { return nil }
        return id
    }

    /// The error of an error response (`"ok":false`); nil for a success or a malformed error.
    public static func failure(in members: [String: JSONValue]) -> AdminFailure? {
        guard members["ok"] == .bool(false), case .object(let error)? = members["error"] else { return nil }
        return try? JSONValueDecoder().decode(AdminFailure.self, from: .object(error))
    }

    /// True for a success (`"ok":true`).
    public static func isSuccess(_ members: [String: JSONValue]) -> Bool { members["ok"] == .bool(true) }

    /// True for the `busy` line an agent at its client limit sends before closing (`id` null).
    public static func isBusy(_ members: [String: JSONValue]) -> Bool {
        members["id"] == .null && members["error"]?.objectValue?["code"] == .string(AdminErrorCode.busy.rawValue)
    }
}

/// What the agent answered a command: the reply, typed, and its members as they came (what
/// `canopyctl --json` prints: members this client does not know included).
public struct AdminAnswer<C: AdminCommand>: Sendable {
    /// The reply.
    public var reply: C.Reply
    /// The response's members, without `id` and `ok`.
    public var members: [String: JSONValue]

    /// Reads a response object: the answer, or the agent's error (`failed` for a success whose
    /// members do not fit `C.Reply`).
    public static func read(_ response: [String: JSONValue]) -> Result<AdminAnswer<C>, AdminFailure> {
        AdminResponseLine.reply(to: C.self, from: response).map { reply in
            var members = response
            members["id"] = nil
            members["ok"] = nil
            return AdminAnswer(reply: reply, members: members)
        }
    }
}
