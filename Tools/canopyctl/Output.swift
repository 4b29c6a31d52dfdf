import CanopyAdmin
import CanopyCore

/// A JSON value as table text: strings bare, null as "-", others in canonical JSON.
func text(_ value: JSONValue?) -> String {
    switch value {
    case nil, .null?: return "-"
    case .string(let string)?: return string
    case .bool(let flag)?: return flag ? "yes" : "no"
    case .int(let number)?: return String(number)
    case let other?: return String(decoding: CanonicalJSON.encode(other), as: UTF8.self)
    }
}

/// A string as table text, nil as "-".
func text(_ value: String?) -> String { value ?? "-" }

/// A number as table text, nil as "-".
func text(_ value: Int64?) -> String { value.map { String($0) } ?? "-" }

/// A flag as table text.
func text(_ value: Bool) -> String { value ? "yes" : "no" }

/// A JSON array of strings as comma-separated text.
func list(_ value: JSONValue?) -> String {
    guard case .array(let items)? = value, !items.isEmpty else { return "-" }
    return items.map { text($0) }.joined(separator: ",")
}

/// Prints rows under a header, each column as wide as its widest cell.
func printTable(_ header: [String], _ rows: [[String]]) {
    var widths = header.map(\.count)
    for row in rows {
        for (index, cell) in row.enumerated() where index < widths.count { widths[index] = max(widths[index], cell.count) }
    }
    for row in [header] + rows {
        let cells = row.enumerated().map { index, cell in
            index == row.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
        }
        print(cells.joined(separator: "  "))
    }
}

/// The per-peer table of `status` and `peers`.
func printPeerTable(_ peers: [Admin.PeerStatus]) {
    guard !peers.isEmpty else { return print("no peers configured") }
    printTable(
        ["NODE ID", "ADDRESS", "CONNECTED", "STATE", "DIRECTION", "MODE", "PUSHED THROUGH", "PULLED THROUGH", "UNCONFIRMED",
         "REFUSED", "REFUSED BY PEER", "VIOLATIONS", "LAST ERROR"],
        peers.map { peer in
            [peer.nodeID, text(peer.address), text(peer.connected), peer.state.rawValue, peer.direction, peer.mode.rawValue,
             text(peer.lastPushedSeq), text(peer.lastPulledSeq), text(peer.pending), text(peer.rejected), text(peer.refusedByPeer),
             text(peer.protocolViolations), text(peer.lastError)]
        })
    // What each peer that broke the protocol last broke: not in the table, it is long.
    for peer in peers {
        guard let last = peer.lastProtocolViolation else { continue }
        let count = peer.protocolViolations
        print("\(peer.nodeID) broke the protocol \(count == 1 ? "once" : "\(count) times"); the last: \(last)")
    }
}

/// Each database replicated with each peer (the `databases` of the peer rows), when any peer
/// shares more than `default` or a database does not replicate both ways as configured; then a
/// line for each database whose writes stay on this node or that the peer does not share back.
func printDatabaseTable(_ peers: [Admin.PeerStatus]) {
    var notices: [String] = []
    let lines = peers.flatMap { peer -> [[String]] in
        peer.databases.map { database in
            let scope = database.prefix.map { "ids starting \($0)" } ?? "every id"
            if let notice = databaseNotice(peer: peer.nodeID, database: database.db, unshared: database.state == .unshared, takes: database.peerTakes) {
                notices.append(notice)
            }
            return [peer.nodeID, database.db, database.access, scope, database.state.rawValue, text(database.peerTakes),
                    text(database.lastPushedSeq), text(database.lastPulledSeq), text(database.rejected), text(database.refusedByPeer),
                    text(database.lastError)]
        }
    }
    guard lines.contains(where: { $0[1] != "default" }) || !notices.isEmpty else { return }
    print("\ndatabases shared with each peer (ACCESS: what the peer may do to this node's copy; PEER TAKES: what it pulls of this node's writes):")
    printTable(["NODE ID", "DATABASE", "ACCESS", "SCOPE", "STATE", "PEER TAKES", "PUSHED THROUGH", "PULLED THROUGH", "REFUSED",
                "REFUSED BY PEER", "LAST ERROR"], lines)
    if !notices.isEmpty { print("") }
    for notice in notices { print(notice) }
}

/// What a user must know of one database's replication with a peer, when it does not go both
/// ways as this node shares it: the peer does not share it back (`unshared`), or takes none or
/// only part of this node's writes (`takes`, as the peer said).
func databaseNotice(peer: String, database name: String, unshared: Bool, takes: String?) -> String? {
    if unshared {
        return "\(peer) does not share \(name) with this node: nothing of it replicates either way (share it on \(peer): canopyctl share \(name) THIS-NODE-ID --access …)"
    }
    guard let takes, takes != "everything" else { return nil }
    if takes == "nothing" {
        return "\(peer) takes none of this node's writes to \(name): it does not pull \(name) from this node (its share of \(name) with this node is read-only, or its direction is push); what this node writes there stays here"
    }
    return "\(peer) takes only \(takes) of this node's writes to \(name); the others stay here"
}
