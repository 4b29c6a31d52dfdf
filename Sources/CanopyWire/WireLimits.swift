import CanopyCore

/// Every limit of the Canopy wire protocol, in one place (`Protocol/design.md` §9.4). Each length prefix, count,
/// queue and window a peer can influence is checked against one of these constants *before*
/// anything is allocated for it. The table in `Protocol/replication-v1.md` §9 lists the same
/// names and values; `SpecConformanceTests` parses that table and compares it with this file, so
/// the two cannot drift. Units go last in every name.
public enum WireLimits {
    // MARK: Protocol identity

    /// The protocol version this code speaks, sent in `hello`. A connection runs at the lower of
    /// the two versions offered; version 1 is the only one so far.
    public static let protocolVersion: UInt64 = 1

    /// The version of a multiplexed connection (`Protocol/replication-v2.md`): each side's
    /// connection `hello` carries it; every database's own session inside a channel still speaks
    /// `protocolVersion`.
    public static let multiplexedProtocolVersion: UInt64 = 2

    // MARK: Frames (§5)

    /// Bytes of the big-endian length prefix in front of every frame's ciphertext.
    public static let frameHeaderBytes = 4

    /// Bytes libsodium's `crypto_secretstream_xchacha20poly1305` adds to each plaintext
    /// (`ABYTES`: one tag byte plus a 16-byte MAC). The wire codec needs it only to bound the
    /// ciphertext length; CanopyCrypto checks it equals the library's constant.
    public static let secretstreamOverheadBytes = 17

    /// The largest frame plaintext. 1 MiB keeps the receive buffer bounded and small next to
    /// Syncthing's 500 MB, while one frame still carries hundreds of typical documents. Larger
    /// messages are split into fragments (§5.3).
    public static let framePlaintextBytesMax = 1 << 20

    /// The smallest ciphertext length a frame may declare: an empty plaintext plus the stream's
    /// overhead. (A frame this short still fails later: a plaintext needs its flags byte.)
    public static let frameCiphertextBytesMin = secretstreamOverheadBytes

    /// The largest ciphertext length a frame may declare, checked against the length prefix
    /// before a single ciphertext byte is buffered.
    public static let frameCiphertextBytesMax = framePlaintextBytesMax + secretstreamOverheadBytes

    /// The largest fragment of a message one frame carries: the plaintext minus its flags byte.
    public static let fragmentBytesMax = framePlaintextBytesMax - 1

    /// The largest reassembled message. 32 MiB holds the largest body (16 MiB) with room for its
    /// ancestry and for the rest of a batch; checked before the reassembly buffer grows.
    public static let messageBytesMax = 32 << 20

    /// Bytes of the secretstream header each side sends once, in clear, before its first frame
    /// (§5.4). Fixed, so it needs no length prefix.
    public static let secretstreamHeaderBytes = 24

    // MARK: Handshake (§4)

    /// Seconds from TCP connect (or accept) within which the handshake must complete, on the
    /// caller's clock. Syncthing allows 20 s for its hello; three small messages need far less.
    public static let handshakeTimeoutSeconds = 10

    /// Bytes of handshake Msg1: magic 4 ‖ version 2 ‖ flags 2 ‖ ephemeral key 32 ‖ network tag 32.
    /// Every handshake message has a fixed size, so no pre-authentication length is ever trusted.
    public static let handshakeMessage1Bytes = 72

    /// Bytes of handshake Msg2: ephemeral key 32 ‖ network tag 32 ‖ sealed identity 96 + MAC 16.
    public static let handshakeMessage2Bytes = 176

    /// Bytes of handshake Msg3: sealed identity 96 + MAC 16.
    public static let handshakeMessage3Bytes = 112

    /// The most refused-but-authenticated peers remembered for an operator to accept; when full,
    /// the least recently seen is forgotten, so fresh identities cannot grow memory.
    public static let pendingPeersMax = 256

    // MARK: Message fields (§6)

    /// The longest document id in UTF-8 bytes (`Protocol/design.md` §2.1: 1–1024).
    public static let docIDBytesMax = 1024

    /// The largest document body (canonical JSON) in bytes.
    public static let bodyBytesMax = 16 << 20

    /// The longest replication id in bytes. Replication ids are opaque digests (typically 16–32
    /// bytes); 64 leaves room for any hash without admitting free text.
    public static let replicationIDBytesMax = 64

    /// The largest opaque checkpoint value in bytes. A checkpoint holds a sequence and a short
    /// session history (`Protocol/design.md` §4.2); 64 KiB is far beyond that and still cheap to hold.
    public static let checkpointValueBytesMax = 64 << 10

    /// The longest human-readable text in an `error`, a rejected `revisionsAck` or a `close`.
    public static let errorMessageBytesMax = 1024

    /// The most entries (documents) in one `changes` request. CouchDB's default batch is 100–500;
    /// 1000 amortises per-message costs for small documents and bounds a reply to a few KiB.
    public static let changesEntriesMax = 1000

    /// The most leaf revisions one `changes` entry may list (open and closed leaves of one
    /// document). Conflicts are rare; closed leaves accumulate slowly and are stemmed.
    public static let entryRevisionsMax = 1024

    /// The most leaf revisions in one `changes` request, summed over its entries. This bounds
    /// the per-request state both sides keep while the batch is in flight.
    public static let batchRevisionsMax = 4096

    /// The most known-ancestor revisions a `changesReply` may give for one entry.
    public static let knownAncestorsMax = 32

    /// The largest `revsLimit` a peer may announce, and so the most ancestry digests one revision
    /// may carry (its own id is not repeated). CouchDB's default is 1000; ten times that is
    /// generous and still bounds one ancestry to 160 KiB.
    public static let revsLimitMax = 10_000

    /// The most document ids in a `subscribe` filter.
    public static let filterDocIDsMax = 10_000

    /// The most `changes` requests a peer may have outstanding towards us (sent, not yet fully
    /// answered). A peer announces its own window (1...this) in `hello`; the sender of `changes`
    /// keeps within the receiver's announced window.
    public static let inFlightBatchesMax = 16

    /// The most other requests (`subscribe`, `checkpointGet`, `checkpointSet`) a peer may have
    /// outstanding towards us at once; replication needs one or two.
    public static let inFlightRequestsMax = 8

    /// The most content bytes one `attachmentPart` carries (and one `attachmentGet` asks for):
    /// small enough that a large attachment's parts interleave with other messages, large
    /// enough that a part's per-message cost is noise.
    public static let attachmentPartBytesMax = 256 << 10

    /// The bytes of an attachment content's digest (BLAKE2b-256) in `attachmentGet`.
    public static let attachmentDigestBytes = 32

    /// The most digest-tree nodes one `digestGet` asks about (and one `digestNodes` answers).
    public static let digestNodesMax = 64

    /// The most documents one answer of `digestNodes` lists: a node of the deepest level holding
    /// more (ids made to share 24 hash bits) is answered `limitExceeded`.
    public static let digestDocumentsMax = 4096

    // MARK: Channels (replication-v2.md)

    /// The most channels a side accepts to have at once on one connection (attached by either
    /// side and not yet detached in both directions); a side announces its own value, 1...this,
    /// in the connection `hello`'s `window`. One channel carries one database.
    public static let channelsMax = 1024

    /// The longest database name in bytes (CouchDB's limit); `DatabaseName` (CanopyCore) holds
    /// the rule.
    public static let databaseNameBytesMax = DatabaseName.bytesMax

    /// The most bytes a `channel` envelope adds to the message it carries: the type byte and a
    /// channel id of up to 10 varint bytes. Envelope and message together stay within
    /// `messageBytesMax`.
    public static let channelEnvelopeBytesMax = 11

    /// The most subscriptions one connection carries at once (one per replication direction and
    /// filter; more is a misbehaving peer).
    public static let subscriptionsMax = 4

    // MARK: Timing (§7)

    /// Seconds without sending anything after which a side sends `heartbeat`. Syncthing pings
    /// after 90 s; 30 s notices a dead path sooner on a LAN while costing nothing measurable.
    public static let heartbeatIntervalSeconds = 30

    /// Seconds without receiving anything after which a side closes the connection with
    /// `timeout`: three missed heartbeats.
    public static let receiveTimeoutSeconds = 90
}
