import CanopyCore
import CanopyStore

/// What a session reports to whoever owns it (a `PeerReplicator`, a test, the simulator).
package enum SessionEvent: Sendable {
    /// The peer's `hello` arrived.
    case connected(peerDatabaseID: [UInt8])
    /// Something happened to documents: one event per document, in the order the batch (or the
    /// failure) produced them; never empty. One `SessionEvent` per batch rather than per
    /// document, because each hop through the owner's closures cost reference counting per
    /// document on the replication hot path (in both agents).
    case documents([DocumentEvent])
    /// Our subscription to the peer's changes recorded a checkpoint at this source sequence.
    case pullCheckpoint(UInt64)
    /// The peer refused our subscription (it does not push to us). The session goes on with the
    /// other direction; the reason is for people.
    case pullRefused(String)
    /// The peer answered a request for attachment content with an error (it does not hold the
    /// content): the revisions naming it stay set aside. The reason is for people.
    case attachmentUnavailable(String)
    /// Our subscription caught up with the peer (every batch up to its current end is durable).
    case pullCaughtUp
    /// A one-shot subscription the peer made to us was served completely.
    case pushCompleted
    /// A batch completed in either direction (progress changed; the session may now be idle).
    case progress
    /// A store failed, this node's (a full disk, an I/O error) or the peer's (it closed with
    /// `storageFailure`); the session closes next (`.closed`). Its owner reports it, so the
    /// session logs it at debug only. `local` says whose; the text says what failed, for people.
    case storeFailed(local: Bool, String)
    /// The session found the peer breaking the protocol (a message out of place, a document it
    /// had no right to send, …) and closes; the text says what, for people. Reported once per
    /// session, and only for what this session found: a connection closed for a violation the
    /// connection found is its owner's to report.
    case protocolViolated(String)
    /// The session ended.
    case closed(TransportCloseReason)
}
