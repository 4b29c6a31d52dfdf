import CanopyCore

/// A revision received in `revisions`, resolved against the `changes` request it answers: the
/// document id, the revision with its kind and ancestry (as a `RevisionPath` the revision tree
/// can merge), and the body bytes. When the source stopped the ancestry at one of the known
/// ancestors we named, that ancestor is the path's last element, so the path grafts onto our tree.
public struct ReceivedRevision: Equatable, Sendable {
    public var docID: String
    /// The source's sequence for this document's change.
    public var sequence: UInt64
    public var path: RevisionPath
    /// The body as sent: canonical JSON that the engine validates before storing.
    public var body: [UInt8]
    /// The source marked the revision's id as imported (not a content hash).
    public var importedID: Bool

    public init(docID: String, sequence: UInt64, path: RevisionPath, body: [UInt8], importedID: Bool = false) {
        self.docID = docID
        self.sequence = sequence
        self.path = path
        self.body = body
        self.importedID = importedID
    }
}
