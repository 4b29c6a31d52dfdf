import CanopyStore

/// Every limit and timing the agent shell uses, in one place (`Protocol/design.md` §9.4). Units go last.
///
/// Each value is checked before anything sized by untrusted input is allocated: a request line is
/// measured against `adminLineBytesMax` while it is being buffered, not after.
public enum AgentLimits {
    /// Documents a peer refused that are remembered per peer and database, with the reason,
    /// for `why` (the oldest make room; the counts in `peers` are kept whole).
    public static let refusedDocumentsKept = 1000

    /// The longest admin request line, newline excluded. A client that sends more gets an error
    /// response and the connection is closed: the agent will not buffer an unbounded line.
    /// A document body may be `StoreLimits.bodyBytesMax` (16 MiB) in canonical JSON on every path
    /// — `put`, `import`, replication, the library — so a line holds that plus 4 MiB for the
    /// request around it and for JSON that a client wrote less compactly than canonical form.
    public static let adminLineBytesMax = StoreLimits.bodyBytesMax + (4 << 20)

    /// Bytes of request lines (read and not yet answered) one admin client may hold on its own,
    /// whatever the others hold. Beyond this it is not read from until it has a grant from
    /// `adminRequestBytesSharedMax`. Every small request (`status`, a `put` of an ordinary
    /// document, a pipelined run of them up to a megabyte) fits, so it never waits for the clients
    /// sending large lines; the 68 slots together hold at most 68 MiB this way.
    public static let adminRequestBytesPerClientMax = 1 << 20

    /// Bytes of request lines held beyond each client's own share, by all admin clients together,
    /// handed out in grants of one line of the largest size (`adminLineBytesMax`): three at once,
    /// the others waiting their turn unread. Without it, 63 clients each sending a 19 MiB line
    /// took the agent from 35 to 1,596 MiB, every line within its limit; with it, the lines held,
    /// and their decoded requests, are those of three. A grant is whole, so its holder can always
    /// finish its line: clients halfway through large lines never wait on each other.
    public static let adminRequestBytesSharedMax = 3 * adminLineBytesMax

    /// Admin connections served at once; more are accepted and closed immediately so a runaway
    /// script cannot exhaust file descriptors the peers need.
    public static let adminConnectionsMax = 64

    /// Admin connections beyond `adminConnectionsMax` kept for the operator: they serve only
    /// `status`, `peers`, `stats` and `shutdown`. When every general slot is taken, the client idle
    /// the longest is closed to make room for a newcomer; these slots are for when none is idle
    /// (64 `events` streams, resolvers, `sync` waits), so that the operator can still see the
    /// agent and stop it. Four let a few operators' commands, or a monitoring probe beside them,
    /// run at once; an idle client on one is closed to make room as on the others.
    public static let adminOperatorConnectionsMax = 4

    /// How often a client that half-closed while its request runs (a `sync` wait) is checked
    /// for having closed its socket completely, which frees its connection slot. A client that
    /// goes without half-closing first is seen at once.
    public static let adminHangUpCheckSeconds = 1.0
    /// How long a client holding a grant for a large request line (`RequestBytesBudget`) may go
    /// without sending a byte of it before it is closed, so that a client that stalls mid-line
    /// cannot keep one of the few grants from the others. A grant held while the request waits
    /// to be run does not count: only a line still arriving.
    public static let adminGrantStallSeconds = 30.0
    /// Inbound peer connections accepted per wake-up of the listener before other work on its
    /// queue (finished handshakes) gets a turn.
    public static let acceptsPerWakeMax = 16

    /// Bytes of responses queued for one admin client that is not reading. Beyond this the client
    /// is disconnected (an `events` stream reader that stalls must not grow the agent's memory).
    /// Room for two of the largest replies (a `get` of a document at the body limit, with its
    /// history), so a client that reads is never cut off.
    public static let adminPendingWriteBytesMax = 2 * adminLineBytesMax

    /// Bytes queued for all admin clients together. The per-client limit alone let 40 `events`
    /// subscribers that stopped reading take the agent to 855 MiB; beyond this total the client
    /// with the most queued (the slowest reader) is disconnected first. Above one client's limit,
    /// so a single client that reads slowly is bounded by its own limit only.
    public static let adminPendingWriteBytesTotalMax = 64 << 20

    /// Bytes of documents in one `export` page past its first leaf: a page of many small
    /// documents, or a document with many large leaves split across pages.
    public static let exportPageBytesMax = 4 << 20

    /// Events kept for `events --since` resumption. A client further behind is told how many
    /// it missed (`gap`), as Syncthing's and Nomad's event streams do.
    public static let eventRingCapacity = 4096

    /// Offers outstanding at once for one resolver client: more conflicts wait, and go out as
    /// answers come back (a resolver that stalls holds this many, not every conflict).
    public static let resolverOffersInFlightMax = 4096

    /// Seconds a shutdown (SIGTERM, `canopyctl shutdown`) waits for answers to offers already
    /// sent to resolver clients before it goes on; an answer after that is lost with the
    /// connection and the conflict is offered again when the agent restarts.
    public static let resolverShutdownGraceSeconds = 3.0

    /// Resolver clients registered at once.
    public static let resolversMax = 64
    /// The longest wait before a conflict whose offers keep timing out is offered again. The
    /// first wait is the offer's `resolver-timeout-seconds`, doubled after each further timeout
    /// up to this: a resolver that was slow once answers the next offer, one that hangs is asked
    /// every five minutes rather than hammered, and `reload` offers at once.
    public static let resolverRetryMaximumSeconds = 300

    /// `[rule NAME]` sections in the config file.
    public static let rulesMax = 1024
    /// Databases one agent holds, `default` included.
    public static let databasesMax = 1024
    /// `[share DB NODE-ID]` sections in the config file.
    public static let sharesMax = 16_384
    /// Databases offered by peers and not shared with them, kept for `db pending`.
    public static let pendingSharesMax = 1024

    /// Seconds a shutdown waits for work in flight before closing anyway.
    public static let shutdownGraceSeconds = 10.0

    /// Seconds `canopyctl shutdown` waits for the agent to exit (its grace period, then the
    /// process ending) before saying it is still running.
    public static let shutdownWaitSeconds = shutdownGraceSeconds + 20

    /// The longest config file read; anything larger is certainly not hand-written.
    public static let configFileBytesMax = 1 << 20

    /// Peers in the config file.
    public static let peersMax = 1024

    /// Documents returned by one `changes` request when the client gives no `limit`, and the most
    /// it may ask for.
    public static let changesDefaultLimit = 1000
    public static let changesLimitMax = 100_000

    /// Documents in one `import` request (the store checks its own batch limit as well).
    public static let importDocumentsMax = 100_000

    /// Bytes of an `import` body given inline on the socket.
    public static let importBodyBytesMax = adminLineBytesMax

    /// Bytes queued for one peer connection that is not reading fast enough. Beyond this the
    /// connection is dropped (the engine reconnects and resumes from its checkpoint). Several
    /// pipelined batches of messages up to `WireLimits.messageBytesMax` fit.
    public static let peerPendingWriteBytesMax = 64 << 20

    /// Concurrent inbound TCP connections that have not finished their handshake.
    public static let pendingInboundConnectionsMax = 32
    /// Of those, the most one source address may hold: a client holding silent connections takes
    /// at most this many slots, and the rest stay free for allowed peers (`HandshakeSlots`).
    public static let pendingInboundPerSourceMax = 8

    /// Pending (refused, unknown) peers remembered for `peer accept`; further unknown peers are
    /// still refused but not listed, so a scan of node ids cannot grow the agent's memory.
    public static let pendingPeersMax = 256

    /// Local changes counted for a peer's `pending` figure in `status`; beyond it `status` shows
    /// this number (counting is a query over the changes feed, so it is bounded).
    public static let pendingCountMax = 10_000

    /// Seconds a shutdown waits for replication batches in flight to finish before closing
    /// sessions anyway (systemd's stop timeout in Tools/systemd is 30 s).
    public static let shutdownDrainSeconds = 5.0

    /// Seconds a shutdown leaves for the final `close` frames to be written to peers.
    public static let closeFlushSeconds = 0.2

    /// The TCP listen backlog.
    public static let tcpListenBacklog = 64

    /// Unix-domain `sun_path` capacity on Linux (UNIX_PATH_MAX, 108), terminating NUL included.
    public static let unixPathBytesMax = 108

    /// Dial backoff: first delay, ceiling and jitter fraction (seconds).
    public static let dialBackoffInitialSeconds = 0.5
    public static let dialBackoffMaximumSeconds = 60.0
    public static let dialBackoffJitter = 0.5

    /// Redial backoff while this node's own store fails (a full disk), first delay and ceiling
    /// (seconds). The connection to the peer works, so the dial backoff would start again at
    /// every connection: a full disk redialled, and logged a warning, every half second. This
    /// schedule is not reset by connecting, only by a batch written again; its ceiling is short
    /// of the dial one's, so a disk given room is caught up within 10 s.
    public static let storeFailureBackoffInitialSeconds = 1.0
    public static let storeFailureBackoffMaximumSeconds = 10.0

    /// Copies of a peer's replication checkpoints kept for it per database. Any allowed peer, a
    /// read-only one too, may ask this node to keep its checkpoint under a replication id of its
    /// choosing; one stored 5,000 records in 8.7 s, which stayed after `peer remove`. A peer has
    /// one id per filter it pulls with, so 64 leave room; beyond it the copy written longest ago
    /// goes (the peer re-checks from an older point, never from a wrong one). A removed or
    /// unsharing peer's copies are removed with it.
    public static let peerCheckpointsMax = 64

    /// Seconds a TCP connect may take before it counts as a failed attempt.
    public static let dialTimeoutSeconds = 10.0

    /// Bytes read from a socket per read call.
    public static let socketReadChunkBytes = 64 * 1024
    /// Chunks read from a socket before its connection yields its queue to other work and reads
    /// on in a new block (16 × 64 KiB = 1 MiB), so a fast peer cannot hold the queue.
    public static let socketReadsPerEvent = 16

    /// Seconds between two log lines of the same repeated warning (for example documents a peer
    /// sent that were refused); the lines held back in between are counted in the next one.
    public static let repeatedWarningIntervalSeconds = 10.0
}
