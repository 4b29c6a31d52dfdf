// The library an application embeds: re-exports the document store, the core types and replication.
@_exported import CanopyCore
@_exported import CanopyStore
@_exported import CanopyReplication
