// The library an application embeds. `import Canopy` shows the types an application writes and
// nothing of the engine: this module's own types, and the engine types an application names
// (documents, revisions, conflicts and their resolvers, rules) under the names below. The
// engine's other types stay in their modules; the choice and its reasons are in the DocC
// catalog's root page (`Canopy.docc/Canopy.md`, *The names the library shows*).
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyReplication
import CanopyStore

// MARK: JSON and revisions

/// A JSON value: a document's body, a field of it, a merged body a resolver returns.
/// `JSONValue.parse` reads JSON text; numbers keep their exact text.
public typealias JSONValue = CanopyCore.JSONValue

/// Why JSON text could not be read as a `JSONValue` (what `JSONValue.parse` throws).
public typealias JSONError = CanopyCore.JSONError

/// A revision id `N-H`: generation `N`, and `H`, 32 hex digits of BLAKE2b-128 over the parent
/// revision, the revision's kind and its canonical JSON. `RevisionID("1-…")` parses one.
public typealias RevisionID = CanopyCore.RevisionID

/// What a revision is: a user's edit or deletion, a closing tombstone that ends a losing branch,
/// or a body or deletion a resolution wrote. Hashed into the revision id.
public typealias RevisionKind = CanopyCore.RevisionKind

/// Computes revision ids as every node does (`RevisionHasher.revisionID(parent:kind:body:)`):
/// the same edit gets the same id on every machine.
public typealias RevisionHasher = CanopyCore.RevisionHasher

// MARK: Documents and the changes feed

/// A revision of a document as ``Database`` returns it: id, revision, kind and body.
public typealias Document = CanopyStore.Document

/// One entry of ``Database/changes(since:)``: a document at its latest change.
public typealias Change = CanopyStore.Change

/// An open leaf of a ``Change``: a revision and its kind.
public typealias ChangeLeaf = CanopyStore.ChangeLeaf

/// How a save or delete handles a stale `replacing` revision: `.failOnConflict`,
/// `.lastWriteWins`, or `.handler` (a closure that returns the body to save).
public typealias WriteConcurrency = CanopyStore.WriteConcurrency

/// What a `WriteConcurrency.handler` closure is given: the write that met a newer revision, and
/// the document's current revision.
public typealias ConflictingWrite = CanopyStore.ConflictingWrite

/// What `Database.saveBulk(_:)` did with one write: `.written(revision)`, or `.conflict(current:)`.
public typealias BulkWriteResult = CanopyStore.BulkWriteResult

// MARK: Attachments

/// One attachment a revision names: content type, length, digest and `revpos`.
public typealias AttachmentMetadata = CanopyCore.AttachmentMetadata

/// The BLAKE2b-256 digest that names attachment content (`blake2b-<64 hex>`).
public typealias AttachmentDigest = CanopyCore.AttachmentDigest

/// What `Database.compactAttachments()` removed and kept.
public typealias AttachmentGarbageReport = CanopyStore.AttachmentGarbageReport

// MARK: Conflicts, resolvers and rules

/// How a database settles the conflicts revisions from peers make: `.automatic`, `.manual`,
/// `.custom(resolver)` or `.rules(ResolutionRules)`.
public typealias ConflictPolicy = CanopyCore.ConflictPolicy

/// A conflicted document as a resolver sees it: its open leaves (the current one first) with
/// their bodies, their common ancestor's body and the revision this node had before.
public typealias Conflict = CanopyCore.Conflict

/// One open leaf of a ``Conflict``: its revision, kind and body.
public typealias ConflictLeaf = CanopyCore.ConflictLeaf

/// What a resolver decides: `.keep(revision)`, `.merged(body)` or `.delete`.
public typealias ResolutionDecision = CanopyCore.ResolutionDecision

/// A conflict resolver an application writes: `resolve(_:)` returns a ``ResolutionDecision``.
public typealias ConflictResolver = CanopyCore.ConflictResolver

/// A ``ConflictResolver`` made from a closure.
public typealias ClosureResolver = CanopyCore.ClosureResolver

/// The resolvers Canopy ships: `localWins`, `remoteWins` and `mergeJSON`.
public typealias BuiltInResolver = CanopyCore.BuiltInResolver

/// Per-document conflict rules, first match wins, a fallback strategy, and the named resolvers
/// the rules refer to (in-process resolvers).
public typealias ResolutionRules = CanopyCore.ResolutionRules

/// One rule of ``ResolutionRules``: which documents (id prefix, body field value) and how.
public typealias ResolutionRule = CanopyCore.ResolutionRule

/// How a rule settles a conflict: `.automatic`, `.localWins`, `.remoteWins`, `.mergeJSON`,
/// `.manual` or `.resolver(name)`; also a node's catch-all `conflicts` setting.
public typealias ResolutionStrategy = CanopyCore.ResolutionStrategy

// MARK: Replication

/// Which way a ``Replicator`` moves documents: `.push`, `.pull` or `.both`.
public typealias ReplicationDirection = CanopyReplication.ReplicationDirection

/// How far a transfer has come: entries completed of those known so far
/// (``Replicator/Status/busy(_:)``).
public typealias ReplicationProgress = CanopyReplication.ReplicationProgress

/// What a peer may do to this node's copy of a database (``Node/share(_:with:access:prefix:)``):
/// `.read`, it may pull from this node; `.write`, it may push into it; `.readWrite`, both.
public typealias ShareAccess = CanopyReplication.ShareAccess

// MARK: Resolvers in a process of their own

/// A resolver in a process of its own: it registers with a running agent's admin socket, is
/// offered the conflicts its rules route to it, and answers them (`Tools/canopyd/README.md`,
/// *Conflict rules and resolvers*).
public typealias ResolverClient = CanopyAgent.ResolverClient

/// One conflict an agent offers a ``ResolverClient``: the ``Conflict``, its database, the peer
/// whose revisions made it and the rule that routed it.
public typealias ResolverOffer = CanopyReplication.ResolverOffer

/// An error an agent answered on its admin socket: a code and a message (a ``ResolverClient``'s
/// refused answer or registration).
public typealias AdminFailure = CanopyAdmin.AdminFailure

/// The admin protocol's error codes (`conflict`, `not_found`, `invalid_argument`, …), as
/// `AdminFailure.code` holds them.
public typealias AdminErrorCode = CanopyAdmin.AdminErrorCode
