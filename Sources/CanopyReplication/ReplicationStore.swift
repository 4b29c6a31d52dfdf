import CanopyCore
import CanopyStore

/// What replication needs from storage, and nothing more: the changes feed and its revisions to
/// send (source side); the revision diff and the insert of checked foreign revisions (target
/// side); local documents for checkpoints; peer horizons for stemming; commit notifications for
/// continuous push.
///
/// `DocumentStore` is the implementation. Replication depends on this protocol rather than on the
/// store's whole API, so its types can be driven by a store made for a test or the simulator, and
/// the application-facing `DocumentStore` API stays apart from what replication uses.
///
/// Calls may block (SQLite); the session makes them on its serial context or hands them to a
/// `ReplicationWorker`. Every method is safe to call from any thread.
package protocol ReplicationStore: AnyObject, Sendable {
    /// The store's permanent 16-byte identity (a replication id is derived from it).
    var databaseIDBytes: [UInt8] { get }
    /// Revisions of history the store keeps per leaf (announced in `hello`).
    var revsLimit: Int { get }
    /// The newest sequence of the changes feed.
    var lastSequence: Int64 { get }

    /// One page of the changes feed after `since` (damaged rows left out and reported).
    func changesPage(since: Int64, limit: Int) throws(StoreError) -> ChangesPage
    /// The current revision of a document, for filters that look at bodies.
    func get(id: String, options: GetOptions) throws(StoreError) -> Document
    /// Revisions to send for `requests`, with their histories.
    func revisionsToSend(_ requests: [RevisionRequest], revsLimit: Int?, knownAncestorReach: Int) throws(StoreError) -> [ForeignRevision]

    /// What the store lacks of each offer, in the offers' order.
    func revsDiff(inOrder offers: [RevisionOffer]) throws(StoreError) -> [RevsDiffEntry?]
    /// Writes revisions `DocumentStore.checkForeign` checked (and a local document, the
    /// checkpoint) in one transaction; `policy`, when given, settles the conflicts they create
    /// instead of the store's own.
    func bulkInsertForeign(
        checked batch: CheckedForeignBatch, local: LocalDocument?, policy: ConflictPolicy?
    ) throws(StoreError) -> [ForeignDocumentResult]
    /// Settles the conflicts the store keeps with `policy` (or its own), in one transaction.
    func retryConflictResolution(policy: ConflictPolicy?) throws(StoreError) -> [ForeignDocumentResult]

    /// Grows each time a write sets revisions aside to wait for attachment content.
    var setAsideCount: Int { get }
    /// How many revisions are set aside for their content.
    func awaitingContentCount() throws(StoreError) -> Int
    /// The attachment content set-aside revisions wait for and this node lacks.
    func awaitedAttachments() throws(StoreError) -> [AwaitedAttachment]
    /// Opens or resumes the fetch of one content; nil while another fetch of this node (with
    /// another peer) holds it.
    func beginDownloadUnlessFetching(_ digest: AttachmentDigest, length: Int64) throws(StoreError) -> AttachmentDownload?
    /// Whether the content is stored whole.
    func holdsAttachment(_ digest: AttachmentDigest, length: Int64) -> Bool
    /// Makes verified downloads durable and names them by their digests.
    func publishDownloads(_ digests: [AttachmentDigest]) throws(StoreError)
    /// Merges the set-aside revisions whose content is all here now (narrowed to those waiting
    /// for `digests`), at most `limit`; `more` says some may remain.
    func settleAwaitingContent(
        digests: [AttachmentDigest]?, policy: ConflictPolicy?, limit: Int
    ) throws(StoreError) -> (results: [ForeignDocumentResult], more: Bool)
    /// Refuses the set-aside revisions waiting for `digest`; returns their documents.
    func refuseAwaiting(digest: AttachmentDigest) throws(StoreError) -> [String]
    /// A part of stored attachment content for a peer, with the content's length; nil when the
    /// content is not here.
    func attachmentPart(of digest: AttachmentDigest, offset: Int64, maxBytes: Int) throws(StoreError) -> (length: Int64, bytes: [UInt8])?
    /// Reports that content `digest` read for a peer does not hash to its digest (see
    /// `DocumentStore.reportDamagedContent(_:)`): damage, counted and made visible as a damaged
    /// document is.
    func reportDamagedContent(_ digest: AttachmentDigest)
    /// Whether a stored revision of a document `admits` accepts names `digest` (see
    /// `DocumentStore.namesAttachment(_:idPrefix:documentIDs:admits:)`).
    func namesAttachment(
        _ digest: AttachmentDigest, idPrefix: String?, documentIDs: [String]?, admits: (String, [UInt8]) -> Bool
    ) throws(StoreError) -> Bool

    /// A local (non-replicated) document's body.
    func localGet(_ id: String) throws(StoreError) -> JSONValue?
    /// Writes a local document.
    func localPut(_ id: String, body: JSONValue) throws(StoreError)
    /// Deletes a local document; false when there was none.
    func localDelete(_ id: String) throws(StoreError) -> Bool
    /// Writes a local document of the family of ids starting with `prefix`, of which at most `max`
    /// are kept (`DocumentStore.localPut(_:body:keepingAtMost:withPrefix:)`); returns how many
    /// made room.
    @discardableResult
    func localPut(_ id: String, body: JSONValue, keepingAtMost max: Int, withPrefix prefix: String) throws(StoreError) -> Int

    /// Records how far a peer holds this store's changes (stemming keeps what it may still need).
    /// The digest tree's root children, from the buckets the store keeps (O(1)).
    var digestRootChildren: [DigestChild] { get }
    /// The documents under any of `paths` whose id starts with `prefix`, each once.
    func digestDocuments(prefix: String, under paths: [DigestNodePath]) throws(StoreError) -> [DigestDocument]

    func recordPeerHorizon(peer: String, sequence: Int64) throws(StoreError)
    /// Calls `handler` after every commit that changed the changes feed.
    func addCommitObserver(_ handler: @escaping @Sendable () -> Void) -> StoreObserverToken
}

extension DocumentStore: ReplicationStore {}
