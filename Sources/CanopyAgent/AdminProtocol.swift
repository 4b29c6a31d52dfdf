import CanopyAdmin
import CanopyCore
import CanopyStore

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

    /// Decodes one line (without its newline) as `AdminRequestLine.decode` does.
    public static func decode(_ line: some Collection<UInt8>) -> Result<AdminRequest, AdminDecodeFailure> {
        AdminRequestLine.decode(line).map { AdminRequest(id: $0.id, command: $0.command, arguments: $0.arguments) }
    }

    /// The arguments as the command `C`, checked; `invalid_argument` names what is wrong.
    func decode<C: AdminCommand>(_ type: C.Type) throws(AdminFailure) -> C {
        try AdminRequestLine(id: id, command: command, arguments: arguments).command(as: C.self)
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
