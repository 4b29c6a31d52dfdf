import ArgumentParser
import CanopyAdmin
import CanopyAgent
import CanopyCore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Replicate once with a peer; --wait waits until both directions are caught up.",
        discussion: """
            With --wait, canopyctl says on stderr what it waits for, shows progress on a terminal, and
            exits 1 when the peer could not be reached in time (--timeout), when documents the peer
            sent were refused (the count and the last reason are printed; `canopyctl peers` keeps them),
            or when a database shared with the peer did not replicate both ways: the peer does not
            share it with this node, or takes none (or only part) of this node's writes to it. The
            databases that are shared both ways are synced all the same.
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument var nodeID: String
    @Flag(help: "Wait until the replication has finished.") var wait = false
    @Option(help: "With --wait: give up after this many seconds (exit 1). Default: wait as long as it takes.")
    var timeout: Double?

    func validate() throws {
        if let timeout, !(timeout > 0) { throw ValidationError("--timeout must be a positive number of seconds") }
        if timeout != nil && !wait { throw ValidationError("--timeout needs --wait") }
    }

    func run() throws {
        guard wait else {
            let answer = try connection.call(Admin.Sync(nodeID: nodeID, wait: false))
            return connection.json ? printJSON(.object(answer.members)) : print("sync started with \(Self.nodeID(of: answer.reply))")
        }
        let peer = try peerRow()
        printError("waiting for \(describe(peer)) to be caught up in both directions"
            + (timeout.map { " (at most \(Self.seconds($0)))" } ?? ""))
        // Progress on a terminal, or as JSON lines on stderr with --json.
        let showProgress = connection.json || isatty(2) == 1
        if showProgress {
            // A second connection streams progress events while the first waits for the answer.
            let events = try connection.connect()
            _ = try connection.call(events, Admin.Subscribe())
            let target = nodeID
            let json = connection.json
            Thread.detachNewThread { ProgressBar.follow(events, nodeID: target, json: json) }
        }
        let client: AdminSocketClient
        do {
            client = try AdminSocketClient(path: try connection.socketPath(), receiveTimeoutSeconds: timeout)
        } catch {
            throw CtlFailure(status: .unreachable, message: "agent not reachable: \(error) (is canopyd running?)")
        }
        let answer: AdminAnswer<Admin.Sync>
        do {
            answer = try connection.call(client, Admin.Sync(nodeID: nodeID, wait: true))
        } catch let failure as CtlFailure where failure.timedOut {
            if showProgress && !connection.json { FileHandle.standardError.write(Data("\n".utf8)) }
            let now = (try? peerRow()).map(describe) ?? "the peer"
            throw CtlFailure(status: .error, message: "sync with \(nodeID) did not finish within \(Self.seconds(timeout ?? 0)): \(now)")
        }
        guard case .finished(let result) = answer.reply else {
            throw CtlFailure(status: .error, message: "the agent answered sync --wait before the sync finished")
        }
        if showProgress && !connection.json { FileHandle.standardError.write(Data("\n".utf8)) }
        if connection.json { printJSON(.object(answer.members)) } else {
            print(Self.summary(result))
        }
        var refusals: [String] = []
        if result.rejected > 0 {
            refusals.append("\(result.rejected) document\(result.rejected == 1 ? "" : "s") from \(result.nodeID) refused during this sync"
                + " (last: \(result.lastRejection ?? "-"))")
        }
        if result.refusedByPeer > 0 {
            refusals.append("\(result.refusedByPeer) document\(result.refusedByPeer == 1 ? "" : "s") pushed to \(result.nodeID) refused by it"
                + " (last: \(result.lastRefusedByPeer ?? "-"))")
        }
        if !refusals.isEmpty {
            throw CtlFailure(status: .error, message: refusals.joined(separator: "; ") + "; `canopyctl peers` shows the counts")
        }
        let oneWay = Self.oneWay(result)
        if !oneWay.isEmpty { throw CtlFailure(status: .error, message: oneWay.joined(separator: "\n")) }
    }

    /// The peer a sync reply names.
    static func nodeID(of reply: Admin.Sync.Reply) -> String {
        switch reply {
        case .started(let started): started.nodeID
        case .finished(let outcome): outcome.nodeID
        }
    }

    /// What the sync moved, for people: "synced with NODE: 3 documents received, 1 sent (12
    /// changes checked)", or that both sides were caught up already (continuous replication
    /// moves documents as they are written, before any sync asks).
    static func summary(_ result: Admin.SyncOutcome) -> String {
        let (received, sent, checked) = (result.received, result.sent, result.completed)
        let head = "synced with \(result.nodeID): "
        guard received > 0 || sent > 0 else {
            return head + "both directions were caught up; nothing to send or receive"
                + " (\(checked) change\(checked == 1 ? "" : "s") checked)"
        }
        return head + "\(received) document\(received == 1 ? "" : "s") received, \(sent) sent"
            + " (\(checked) change\(checked == 1 ? "" : "s") checked)"
    }

    /// The databases that did not replicate both ways as this node shares them, one line each:
    /// the peer does not share them back, or takes none or part of this node's writes to them.
    static func oneWay(_ result: Admin.SyncOutcome) -> [String] {
        let peer = result.nodeID
        var lines = result.notSharedByPeer.map { row in
            "\(peer) does not share \(row.db) with this node, so nothing of it was synced (it said: \(row.reason))"
        }
        lines += result.peerTakesPart.compactMap { databaseNotice(peer: peer, database: $0.db, unshared: false, takes: $0.peerTakes) }
        return lines.filter { !$0.isEmpty }
    }

    /// The configured peer's row from `peers` (a usage error when it is not configured).
    private func peerRow() throws -> Admin.PeerStatus {
        let wanted = AgentIdentity.normalizeNodeID(nodeID) ?? nodeID
        guard let row = try connection.call(Admin.Peers()).reply.peers.first(where: { $0.nodeID == wanted }) else {
            throw CtlFailure(status: .notFound, message: "\(nodeID) is not a configured peer (see `canopyctl peers`)")
        }
        return row
    }

    /// "NODE at ADDRESS (offline: last error)" for people.
    private func describe(_ peer: Admin.PeerStatus) -> String {
        var line = peer.nodeID
        if let address = peer.address { line += " at \(address)" } else { line += " (it connects to this node)" }
        line += ", \(peer.state.rawValue)"
        if let error = peer.lastError { line += " (last error: \(error))" }
        return line
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}

/// Draws `[#####.....] completed/total` on stderr from `sync.progress` events.
/// Follows `sync.progress` events on stderr: on a terminal one line rewritten in place, with
/// `--json` one JSON line per event. A sync's total is not known up front (the peer's feed is
/// read as it goes), so the line counts the changes checked so far and says how many are known
/// to be waiting, never a bar whose end moves.
enum ProgressBar {
    /// The event a line of a subscribed connection carries, or nil for a line of another kind.
    static func event(in line: [String: JSONValue]) -> Admin.Event? {
        guard case .event(let event)? = try? AdminLine.read(line) else { return nil }
        return event
    }

    static func follow(_ client: AdminSocketClient, nodeID: String, json: Bool) {
        let wanted = AgentIdentity.normalizeNodeID(nodeID) ?? nodeID
        while let line = try? client.readObject() {
            guard let progress = Self.event(in: line)?.data(as: Admin.SyncProgress.self), progress.nodeID == wanted else { continue }
            let (completed, total) = (progress.completed, progress.total)
            if json {
                let progress: JSONValue = .object(["progress": .object(["checked": .int(completed), "known": .int(total)])])
                FileHandle.standardError.write(Data(CanonicalJSON.encode(progress) + [UInt8(ascii: "\n")]))
            } else {
                let waiting = max(0, total - completed)
                FileHandle.standardError.write(Data("\r\(completed) changes checked, \(waiting) more known so far\u{1B}[K".utf8))
            }
        }
    }
}

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stream events; --since N first replays those after N that the agent still holds.")
    @OptionGroup var connection: ConnectionOptions
    // Unconditional: `--since -1` is a value to refuse by name, not an unknown option `-1`.
    @Option(parsing: .unconditional, help: "Replay events after this sequence number (0 or more).") var since: Int64?

    func validate() throws {
        if let since, since < 0 { throw ValidationError("--since must be an event sequence number: 0 or more, not \(since)") }
    }

    func run() throws {
        let client = try connection.connect()
        let missed = try connection.call(client, Admin.Subscribe(since: since)).reply.missed
        if missed > 0 {
            printError("\(missed) events after \(since ?? 0) are no longer held by the agent")
        }
        while true {
            let line: [String: JSONValue]
            do { line = try client.readObject() } catch { return }
            guard let event = ProgressBar.event(in: line) else { continue }
            if connection.json {
                printJSON(event.json)
            } else {
                print("\(event.seq) \(event.type) \(String(decoding: CanonicalJSON.encode(event.data), as: UTF8.self))")
            }
            fflush(nil)
        }
    }
}
