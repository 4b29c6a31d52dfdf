import CanopyCore

/// Which attachment content the store's revisions name, and collecting the rest.
///
/// A revision names content in its body's `_attachments` member; so does a peer's revision set
/// aside until its content arrives. Every body the store still
/// keeps counts, whatever its revision: current and conflicting leaves, deleted and closed
/// leaves, and non-leaf revisions whose bodies compaction has not dropped yet (a conflict's
/// common ancestor, or any ancestor before `compact()`), since a resolver or a read of that
/// revision may still ask for its attachments. A revision whose body was dropped names nothing.
extension DocumentStore {
    /// The digest of every content some revision body stored here names, read from one snapshot
    /// of the last committed transaction on a connection of its own (the store keeps writing
    /// meanwhile; an in-memory store is read under its lock). One scan of the revisions: SQLite
    /// passes on only the bodies holding the bytes `"_attachments":`, and those are read as far
    /// as their top-level `_attachments` member.
    /// With `includingSetAside` false, only what stored revisions name: content that must be
    /// here (a revision set aside may still be fetching its content).
    public func namedAttachmentDigests(includingSetAside: Bool = true) throws(StoreError) -> Set<AttachmentDigest> {
        let read: (Database) throws -> Set<AttachmentDigest> =
            includingSetAside ? Self.namedAttachmentDigests : { try RevisionRows.digestsNamedByStoredBodies($0) }
        guard db.path != ":memory:", !db.path.isEmpty else { return try readBatch(read) }
        do {
            let reader = try Database.snapshotReader(path: db.path)
            return try reader.readTransaction(read)
        } catch {
            throw reported(StoreError.wrap(error))
        }
    }

    /// `namedAttachmentDigests()` on `db`, in the caller's transaction.
    static func namedAttachmentDigests(_ db: Database) throws -> Set<AttachmentDigest> {
        var named = try RevisionRows.digestsNamedByStoredBodies(db)
        try digestsNamedBySetAside(db, into: &named)
        return named
    }

    /// Adds the content the revisions set aside for their content name, both what is already here
    /// and what is being fetched (`DocumentStore+AwaitingContent`). `schema` as in
    /// `RevisionRows.digestsNamedByStoredBodies(_:schema:)`.
    static func digestsNamedBySetAside(_ db: Database, schema: String = "main", into named: inout Set<AttachmentDigest>) throws {
        for body in try db.query("SELECT body FROM \(schema).awaiting_revisions", row: { $0.blob(0) ?? [] }) {
            if let member = (try? JSONValue.parse(body))?.objectValue?[Attachments.member] {
                collectDigests(in: member, into: &named)
            }
        }
    }

    /// Adds the digest of every content a stored revision's `body` names in its top-level
    /// `_attachments` member (nothing when it has none), read as far as that member.
    static func attachmentDigests(namedIn body: [UInt8], into named: inout Set<AttachmentDigest>) {
        guard AttachmentCheck.names(body) else { return }
        let member: JSONValue?
        if let found = CanonicalJSONReader.member(Attachments.member, of: body) {
            member = found
        } else {
            member = (try? JSONValue.parse(body))?.objectValue?[Attachments.member]
        }
        if let member { collectDigests(in: member, into: &named) }
    }

    /// Adds every string in `value` that is a digest's text form: for a well-formed
    /// `_attachments` member, exactly the digests of its stubs; for a malformed one, never
    /// fewer than it may mean (content is kept when in doubt).
    private static func collectDigests(in value: JSONValue, into named: inout Set<AttachmentDigest>) {
        switch value {
        case .string(let text):
            if let digest = AttachmentDigest(text) { named.insert(digest) }
        case .object(let members):
            for member in members.values { collectDigests(in: member, into: &named) }
        case .array(let elements):
            for element in elements { collectDigests(in: element, into: &named) }
        default:
            break
        }
    }

    /// Removes the attachment content no revision of `stores` names from the directory they
    /// share (`AttachmentStore.collectGarbage(keeping:)`), keeping pinned content. `stores`
    /// must be every store of the process whose attachments live in that directory (an
    /// agent's databases all share `DIR/attachments`): content only a store left out names
    /// would be removed. Throws, removing nothing, when `stores` is empty or they name
    /// different directories.
    ///
    /// Run `compact()` on the stores first to also free the content that only dropped
    /// revisions named.
    public static func collectAttachmentGarbage(of stores: [DocumentStore]) throws(StoreError) -> AttachmentGarbageReport {
        guard let attachments = stores.first?.attachments else { throw .attachment("no store to collect attachment content for") }
        if let other = stores.first(where: { !$0.attachments.sharesDirectory(with: attachments) }) {
            throw .attachment(
                "the stores keep attachments in different directories (\(attachments.directory), \(other.attachments.directory)); collect each directory with the stores sharing it")
        }
        return try attachments.collectGarbage { () throws(StoreError) -> Set<AttachmentDigest> in
            var named = Set<AttachmentDigest>()
            for store in stores { named.formUnion(try store.namedAttachmentDigests()) }
            return named
        }
    }

    /// Whether this store keeps its attachment content in a directory of its own (beside its
    /// file, the default) rather than one given by its configuration, which other stores may
    /// share (an agent's databases): only then may its content be collected looking at its
    /// revisions alone.
    public var ownsAttachmentDirectory: Bool { configuration.attachmentsDirectory == nil }
}
