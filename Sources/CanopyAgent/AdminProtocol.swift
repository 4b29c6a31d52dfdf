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

    /// The line as it was read.
    package var line: AdminRequestLine { AdminRequestLine(id: id, command: command, arguments: arguments) }

    /// The arguments as the command `C`, checked; `invalid_argument` names what is wrong.
    func decode<C: AdminCommand>(_ type: C.Type) throws(AdminFailure) -> C {
        try line.command(as: C.self)
    }
}
