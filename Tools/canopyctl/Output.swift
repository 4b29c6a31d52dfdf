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
func printPeerTable(_ peers: JSONValue?) {
    guard case .array(let rows)? = peers, !rows.isEmpty else { return print("no peers configured") }
    printTable(
        ["NODE ID", "ADDRESS", "CONNECTED", "STATE", "DIRECTION", "MODE", "PUSHED THROUGH", "PULLED THROUGH", "UNCONFIRMED",
         "REFUSED", "REFUSED BY PEER", "VIOLATIONS", "LAST ERROR"],
        rows.map { row in
            let peer = row.objectValue ?? [:]
            return ["node_id", "address", "connected", "state", "direction", "mode", "last_pushed_seq", "last_pulled_seq", "pending",
                    "rejected", "refused_by_peer", "protocol_violations", "last_error"]
                .map { text(peer[$0]) }
        })
    // What each peer that broke the protocol last broke: not in the table, it is long.
    for row in rows {
        let peer = row.objectValue ?? [:]
        guard case .string(let last)? = peer["last_protocol_violation"] else { continue }
        let count = text(peer["protocol_violations"])
        print("\(text(peer["node_id"])) broke the protocol \(count == "1" ? "once" : "\(count) times"); the last: \(last)")
    }
}

/// Each database replicated with each peer (the `databases` of the peer rows), when any peer
/// shares more than `default` or a database does not replicate both ways as configured; then a
/// line for each database whose writes stay on this node or that the peer does not share back.
func printDatabaseTable(_ peers: JSONValue?) {
    guard case .array(let rows)? = peers else { return }
    var notices: [String] = []
    let lines = rows.flatMap { row -> [[String]] in
        let peer = row.objectValue ?? [:]
        guard case .array(let databases)? = peer["databases"] else { return [] }
        return databases.map { entry in
            let database = entry.objectValue ?? [:]
            let scope = database["prefix"].flatMap { $0 == .null ? nil : "ids starting \(text($0))" } ?? "every id"
            if let notice = databaseNotice(peer: text(peer["node_id"]), database) { notices.append(notice) }
            return [text(peer["node_id"]), text(database["db"]), text(database["access"]), scope, text(database["state"]),
                    text(database["peer_takes"]), text(database["last_pushed_seq"]), text(database["last_pulled_seq"]),
                    text(database["rejected"]), text(database["refused_by_peer"]), text(database["last_error"])]
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
/// ways as this node shares it: the peer does not share it back, or takes none or only part of
/// this node's writes.
func databaseNotice(peer: String, _ database: [String: JSONValue]) -> String? {
    let name = text(database["db"])
    if database["state"] == .string("unshared") {
        return "\(peer) does not share \(name) with this node: nothing of it replicates either way (share it on \(peer): canopyctl share \(name) THIS-NODE-ID --access …)"
    }
    guard case .string(let takes)? = database["peer_takes"], takes != "everything" else { return nil }
    if takes == "nothing" {
        return "\(peer) takes none of this node's writes to \(name): it does not pull \(name) from this node (its share of \(name) with this node is read-only, or its direction is push); what this node writes there stays here"
    }
    return "\(peer) takes only \(takes) of this node's writes to \(name); the others stay here"
}
