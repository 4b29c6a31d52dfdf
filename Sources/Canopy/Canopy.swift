// The library an application embeds: re-exports the document store, the core types and replication.
@_exported import CanopyCore
@_exported import CanopyStore
@_exported import CanopyReplication

import CanopyAgent


/// What a peer may do to this node's copy of a database (``Node/share(_:with:access:prefix:)``):
/// `.read`, it may pull from this node; `.write`, it may push into it; `.readWrite`, both.
public typealias ShareAccess = CanopyReplication.ShareAccess

/// A resolver in a process of its own: it registers with a running agent's admin socket, is
/// offered the conflicts its rules route to it, and answers them (`Tools/canopyd/README.md`,
/// *Conflict rules and resolvers*).
public typealias ResolverClient = CanopyAgent.ResolverClient
