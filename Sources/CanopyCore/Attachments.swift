/// The BLAKE2b-256 digest that names an attachment's content; its text form is `blake2b-`
/// followed by 64 lowercase hex digits. Why BLAKE2b and not SHA-256: `Tools/canopy-bench/README.md`,
/// *attachment-storage*.
public struct AttachmentDigest: Hashable, Sendable, CustomStringConvertible {
    /// The text form's prefix.
    public static let prefix = "blake2b-"
    /// The digest's length in bytes.
    public static let byteCount = 32

    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// The digest of these 32 bytes.
    public init(bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount, "an attachment digest has 32 bytes")
        self.bytes = bytes
    }

    /// The digest in its text form, or nil when `text` is not `blake2b-` and 64 lowercase hex digits.
    public init?(_ text: String) {
        guard text.hasPrefix(Self.prefix) else { return nil }
        let hex = text.dropFirst(Self.prefix.count)
        guard hex.utf8.count == 2 * Self.byteCount, let bytes = Hex.decode(String(hex)) else { return nil }
        self.bytes = bytes
    }

    /// The 64 hex digits alone: the name of the content's file.
    public var hex: String { Hex.encode(bytes) }

    public var description: String { Self.prefix + hex }
}

/// One attachment as a revision's `_attachments` member describes it (CouchDB's stub): the
/// content itself is kept apart, named by `digest`. The metadata is part of the body, so it is
/// part of what the revision id hashes (`Protocol/canonical-json.md` §5).
public struct AttachmentMetadata: Sendable, Equatable {
    /// The content's MIME type, as the application gave it.
    public var contentType: String
    /// The content's length in bytes.
    public var length: Int64
    /// The digest of the content.
    public var digest: AttachmentDigest
    /// The generation of the revision that added or last replaced the content.
    public var revpos: Int

    /// Metadata for content already stored.
    public init(contentType: String, length: Int64, digest: AttachmentDigest, revpos: Int) {
        self.contentType = contentType
        self.length = length
        self.digest = digest
        self.revpos = revpos
    }

    /// The member as a body holds it: `{content_type, digest, length, revpos, stub: true}`.
    public var json: JSONValue {
        .object([
            "content_type": .string(contentType), "digest": .string(digest.description), "length": .int(length),
            "revpos": .int(Int64(revpos)), "stub": .bool(true),
        ])
    }
}

/// A body's `_attachments` member that breaks the rules of `Protocol/canonical-json.md` §5.
public struct AttachmentError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, naming the attachment.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// Reading and writing a body's `_attachments` member.
public enum Attachments {
    /// The body member that holds attachment metadata.
    public static let member = "_attachments"
    /// The longest attachment name, in UTF-8 bytes.
    public static let nameBytesMax = 255
    /// The longest content type, in UTF-8 bytes.
    public static let contentTypeBytesMax = 255
    /// The most attachments one revision may name.
    public static let countMax = 1_000

    /// The attachments `body` names, by name: empty when it has no `_attachments` member. Throws
    /// when the member is not an object of valid stubs (each exactly the five members of
    /// `AttachmentMetadata.json`, with `stub` true).
    public static func metadata(in body: JSONValue) throws(AttachmentError) -> [String: AttachmentMetadata] {
        guard case .object(let members) = body, let value = members[member] else { return [:] }
        guard case .object(let entries) = value else { throw AttachmentError("_attachments is not an object") }
        guard entries.count <= countMax else { throw AttachmentError("_attachments names \(entries.count) attachments; at most \(countMax)") }
        var result: [String: AttachmentMetadata] = [:]
        for (name, entry) in entries {
            if let problem = problem(withName: name) { throw AttachmentError(problem) }
            result[name] = try metadata(entry, name: name)
        }
        return result
    }

    /// Why `name` cannot name an attachment (1 to 255 UTF-8 bytes, not starting with `_`), or nil.
    public static func problem(withName name: String) -> String? {
        let count = name.utf8.count
        guard (1...nameBytesMax).contains(count) else { return "an attachment name has 1 to \(nameBytesMax) bytes; \"\(name.prefix(80))\" has \(count)" }
        guard !name.hasPrefix("_") else { return "attachment name \"\(name.prefix(80))\" starts with _ (reserved)" }
        return nil
    }

    /// `body` with `attachments` as its `_attachments` member (none: the member removed).
    public static func body(_ body: JSONValue, with attachments: [String: AttachmentMetadata]) -> JSONValue {
        guard case .object(var members) = body else { return body }
        members[member] = attachments.isEmpty ? nil : .object(attachments.mapValues(\.json))
        return .object(members)
    }

    /// One `_attachments` entry, `name`'s stub, read and checked (the name itself is not).
    package static func metadata(_ entry: JSONValue, name: String) throws(AttachmentError) -> AttachmentMetadata {
        let shown = "attachment \"\(name.prefix(80))\""
        guard case .object(let fields) = entry else { throw AttachmentError("\(shown) is not an object") }
        let known: Set<String> = ["content_type", "digest", "length", "revpos", "stub"]
        if let unknown = fields.keys.filter({ !known.contains($0) }).sorted().first {
            throw AttachmentError("\(shown) has the unknown member \"\(unknown.prefix(80))\" (content travels apart: no data)")
        }
        guard case .string(let contentType)? = fields["content_type"], (1...contentTypeBytesMax).contains(contentType.utf8.count) else {
            throw AttachmentError("\(shown) needs content_type, a string of 1 to \(contentTypeBytesMax) bytes")
        }
        guard case .string(let digestText)? = fields["digest"], let digest = AttachmentDigest(digestText) else {
            throw AttachmentError("\(shown) needs digest, blake2b- and 64 lowercase hex digits")
        }
        guard case .int(let length)? = fields["length"], length >= 0 else {
            throw AttachmentError("\(shown) needs length, an integer ≥ 0")
        }
        guard case .int(let revpos)? = fields["revpos"], (1...Int64(RevisionID.generationMax)).contains(revpos) else {
            throw AttachmentError("\(shown) needs revpos, a generation ≥ 1")
        }
        guard fields["stub"] == .bool(true) else { throw AttachmentError("\(shown) needs stub: true") }
        return AttachmentMetadata(contentType: contentType, length: length, digest: digest, revpos: Int(revpos))
    }
}
