import CanopyCore
import CanopyReplication

/// Writes config files: a fresh one for `canopyd init`, and line edits for `peer add/remove` that
/// leave every other line (comments included) exactly as the operator wrote it.
package enum ConfigEditor {
    /// The text of a new config file, with comments explaining each setting.
    public static func render(_ config: AgentConfig) -> String {
        var text = """
            # Canopy agent configuration (see Tools/canopyd/README.md, "The config file").
            # Edit freely. `canopyctl reload` or SIGHUP applies peers, [limits], conflicts and
            # [rule NAME] sections at once; listen and revs-limit take effect when canopyd restarts.

            listen = \(config.listen)          # HOST:PORT for peers; port 0 picks a free port
            conflicts = \(config.conflicts)     # automatic | local-wins | remote-wins | merge-json | manual | resolver NAME
            revs-limit = \(config.revsLimit)          # revision ancestors kept per leaf
            \(networkKeyLine(config.networkKey))

            [limits]
            batch-revisions = \(config.limits.batchRevisions)
            batches-in-flight = \(config.limits.batchesInFlight)
            heartbeat-seconds = \(config.limits.heartbeatSeconds)
            resolver-timeout-seconds = \(config.limits.resolverTimeoutSeconds)

            """
        for database in config.databases {
            text += "\n" + databaseSection(database)
        }
        for peer in config.peers {
            text += "\n" + peerSection(peer)
        }
        for share in config.shares {
            text += "\n" + shareSection(share)
        }
        return text
    }

    /// The `network-key` line: the key when there is one, else a comment saying how to set one
    /// (a top-level key: it must come before the first section).
    static func networkKeyLine(_ key: [UInt8]?) -> String {
        if let key { return "network-key = \(Hex.encode(key))   # only agents with this key connect (restart to change)" }
        return "# network-key = <64 hex digits from `openssl rand -hex 32`>   # a private mesh: only agents with the same key connect"
    }

    /// The lines of one `[database …]` section, newline-terminated (its rules are `[rule …]`
    /// sections of their own).
    public static func databaseSection(_ database: DatabaseConfig) -> String {
        """
        [database \(database.name)]
        revs-limit = \(database.revsLimit)
        conflicts = \(database.conflicts)

        """
    }

    /// `text` with a section for `database` appended. `parsed` must be the result of parsing
    /// `text`, and have no section for it.
    public static func addingDatabase(_ database: DatabaseConfig, to text: String, parsed: ParsedConfig) -> String {
        precondition(parsed.databaseSections[database.name] == nil, "database \(database.name) already has a section")
        return appending(databaseSection(database), to: text)
    }

    /// `text` without the database's section and its `[share …]` sections; unchanged if it has
    /// none. Rules naming it stay (the parser then reports them, pointing at their lines).
    public static func removingDatabase(_ name: DatabaseName, from text: String, parsed: ParsedConfig) -> String {
        guard let range = parsed.databaseSections[name] else { return text }
        return removingShares(from: text, parsed: parsed, also: range) { $0.database == name }
    }

    /// The lines of one `[peer …]` section, newline-terminated.
    public static func peerSection(_ peer: PeerConfig) -> String {
        """
        [peer \(peer.nodeID)]
        address = \(peer.address.map(\.description) ?? "-")
        direction = \(peer.direction.rawValue)
        mode = \(peer.mode.rawValue)

        """
    }

    /// `text` with the peer's section replaced (if present) or appended (if not).
    /// `parsed` must be the result of parsing `text`.
    public static func settingPeer(_ peer: PeerConfig, in text: String, parsed: ParsedConfig) -> String {
        if let range = parsed.peerSections[peer.nodeID] {
            // Its shares stay: the peer is edited, not removed.
            let without = removing([range], from: text)
            return appending(peerSection(peer), to: without)
        }
        return appending(peerSection(peer), to: text)
    }

    /// The lines of one `[share …]` section, newline-terminated.
    public static func shareSection(_ share: Share) -> String {
        var section = "[share \(share.database) \(share.nodeID)]\naccess = \(share.access.rawValue)\n"
        if let prefix = share.prefix { section += "prefix = \(prefix)\n" }
        return section + "\n"
    }

    /// `text` with the share's section replaced (if present) or appended (if not).
    /// `parsed` must be the result of parsing `text`.
    public static func settingShare(_ share: Share, in text: String, parsed: ParsedConfig) -> String {
        let key = ShareKey(share.database, share.nodeID)
        let without = parsed.shareSections[key].map { removing([$0], from: text) } ?? text
        return appending(shareSection(share), to: without)
    }

    /// `text` without the `[share …]` sections `isRemoved` picks (a peer's or a database's, when
    /// it goes) and the `also` ranges (that peer's or database's own section). `parsed` must be
    /// the result of parsing `text`.
    public static func removingShares(
        from text: String, parsed: ParsedConfig, also: Range<Int>? = nil, where isRemoved: (ShareKey) -> Bool
    ) -> String {
        removing(parsed.shareSections.filter { isRemoved($0.key) }.map(\.value) + (also.map { [$0] } ?? []), from: text)
    }

    /// `text` without the peer's section and its `[share …]` sections; unchanged if the peer is
    /// not in it.
    /// `parsed` must be the result of parsing `text`.
    public static func removingPeer(_ nodeID: String, from text: String, parsed: ParsedConfig) -> String {
        guard let range = parsed.peerSections[nodeID] else { return text }
        return removingShares(from: text, parsed: parsed, also: range) { $0.nodeID == nodeID }
    }

    /// `text` without the lines of `ranges` (sections, header through last key line).
    private static func removing(_ ranges: [Range<Int>], from text: String) -> String {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        // Last first, so the earlier ranges still name their lines.
        for range in ranges.sorted(by: { $0.lowerBound > $1.lowerBound }) {
            // Take one blank line after the section with it, so repeated add/remove does not
            // accumulate blank lines.
            var end = range.upperBound
            if end < lines.count, lines[end].trimmingSpaces.isEmpty, end + 1 < lines.count { end += 1 }
            lines.removeSubrange(range.lowerBound..<end)
        }
        return lines.joined(separator: "\n")
    }

    private static func appending(_ section: String, to text: String) -> String {
        if text.isEmpty { return section }
        if text.hasSuffix("\n\n") { return text + section }
        if text.hasSuffix("\n") { return text + "\n" + section }
        return text + "\n\n" + section
    }
}
