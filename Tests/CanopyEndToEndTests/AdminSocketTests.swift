import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

private func errorCode(_ response: [String: JSONValue]) -> String? {
    guard response["ok"] == .bool(false), case .object(let error)? = response["error"], case .string(let code)? = error["code"] else {
        return nil
    }
    return code
}

/// A client like `nc -U -N` or `socat`: connects to `path`, writes `bytes`, half-closes
/// (`shutdown(SHUT_WR)`), then reads until the agent closes or `enough` says the lines read so far
/// suffice, waiting at most `seconds` per read; returns the lines read and whether the agent
/// closed the connection.
private func halfClosingClient(
    path: String, bytes: [UInt8], seconds: Int = 30, enough: ([String]) -> Bool = { _ in false }
) throws -> (lines: [String], closed: Bool) {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw AdminSocketClient.ClientError.unreachable(path: path, detail: "socket") }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
    }
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard connected == 0 else { throw AdminSocketClient.ClientError.unreachable(path: path, detail: "connect") }
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var offset = 0
    while offset < bytes.count {
        let count = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard count > 0 else { throw AdminSocketClient.ClientError.closed }
        offset += count
    }
    shutdown(fd, Int32(SHUT_WR))
    var received: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    var lines: [String] { String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init) }
    while true {
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { return (lines, count == 0) }
        received.append(contentsOf: chunk[0..<count])
        if enough(lines) { return (lines, false) }
    }
}

@Suite("the admin socket, against a real agent", .serialized)
struct AdminSocketTests {
    @Test("the socket is mode 0600 and bad requests get errors on a connection that stays usable")
    func badRequestsGetErrors() throws {
        let agent = try AgentProcess()
        try agent.start()
        var info = stat()
        #expect(stat(agent.socketPath, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)

        let client = try agent.client()
        let lines: [(String, String)] = [
            ("this is not json", "parse_error"),
            (#"["status"]"#, "invalid_request"),
            (#"{"id":1}"#, "invalid_request"),
            (#"{"id":2,"cmd":"frobnicate"}"#, "unknown_command"),
            (#"{"id":3,"cmd":"get"}"#, "invalid_argument"),
            (#"{"id":4,"cmd":"put","doc":"a","body":"not an object"}"#, "invalid_argument"),
            (#"{"id":5,"cmd":"changes","since":"yesterday"}"#, "invalid_argument"),
            (#"{"id":6,"cmd":"get","doc":"missing"}"#, "not_found"),
        ]
        for (line, code) in lines {
            try client.sendLine(Array(line.utf8))
            let response = try client.readObject()
            #expect(errorCode(response) == code, "\(line) → \(response)")
        }
        #expect(try client.request("status")["node_id"] == .string(agent.nodeID))
    }

    @Test("documents written through the socket read back in CouchDB's shape, and a stale rev is a conflict")
    func documentsRoundTrip() throws {
        let agent = try AgentProcess()
        try agent.start()
        let client = try agent.client()
        let created = try client.request("put", ["doc": .string("d1"), "body": .object(["n": .int(1)])])
        guard case .string(let rev1)? = created["rev"] else {
            Issue.record("no rev in \(created)")
            return
        }
        let updated = try client.request("put", ["doc": .string("d1"), "body": .object(["n": .int(2)]), "rev": .string(rev1)])
        #expect(updated["ok"] == .bool(true))
        let stale = try client.request("put", ["doc": .string("d1"), "body": .object(["n": .int(3)]), "rev": .string(rev1)])
        #expect(errorCode(stale) == "conflict")
        let got = try client.request("get", ["doc": .string("d1"), "revs": .bool(true)])
        guard case .object(let doc)? = got["doc"] else {
            Issue.record("no doc in \(got)")
            return
        }
        #expect(doc["_id"] == .string("d1"))
        #expect(doc["_rev"] == updated["rev"])
        #expect(doc["n"] == .int(2))
        #expect(doc["_revisions"]?.objectValue?["start"] == .int(2))
        let changes = try client.request("changes", ["since": .int(0)])
        #expect(changes["last_seq"] == .int(2))
    }

    @Test("a line over 1 MiB gets an error response and the connection is closed")
    func overlongLineCloses() throws {
        let agent = try AgentProcess()
        try agent.start()
        let client = try agent.client()
        let huge = #"{"id":1,"cmd":"put","doc":"x","body":{"s":""# + String(repeating: "a", count: AgentLimits.adminLineBytesMax) + #""}}"#
        try? client.sendLine(Array(huge.utf8))  // the agent may close before reading all of it
        let response = try client.readObject()
        #expect(errorCode(response) == "line_too_long")
        #expect(throws: AdminSocketClient.ClientError.self) { _ = try client.readLine() }
        #expect(try agent.client().request("status")["ok"] == .bool(true))
    }

    @Test("events carry sequence numbers and a client resuming with since misses none")
    func eventsResume() throws {
        let agent = try AgentProcess()
        try agent.start()
        let writer = try agent.client()
        for index in 0..<3 { _ = try writer.request("put", ["doc": .string("e\(index)"), "body": .object([:])]) }
        let reader = try agent.client()
        let subscribed = try reader.request("events", ["since": .int(0)])
        #expect(subscribed["missed"] == .int(0))
        var sequences: [Int64] = []
        var documents: [String] = []
        while documents.count < 3 {
            let line = try reader.readObject()
            guard case .object(let event)? = line["event"], case .int(let seq)? = event["seq"] else { continue }
            sequences.append(seq)
            if event["type"] == .string("document.changed"), case .string(let doc)? = event["data"]?.objectValue?["doc"] {
                documents.append(doc)
            }
        }
        #expect(documents == ["e0", "e1", "e2"])
        #expect(sequences == Array(1...Int64(sequences.count)))
        // Live events follow the backlog on the same connection.
        _ = try writer.request("put", ["doc": .string("e3"), "body": .object([:])])
        let live = try reader.readObject()
        #expect(live["event"]?.objectValue?["seq"] == .int(Int64(sequences.count + 1)))
    }

    @Test("a client that half-closes after its requests gets every answer, the last line counted without its newline, then the close")
    func halfClosedClientIsAnswered() throws {
        let agent = try AgentProcess()
        try agent.start()
        // A body over one 64 KiB read, so the requests and the end of stream arrive in several reads.
        let big = String(repeating: "b", count: 200_000)
        let requests = #"{"id":1,"cmd":"put","doc":"big","body":{"s":"\#(big)"}}"# + "\n" + #"{"id":2,"cmd":"get","doc":"big"}"#
        let (lines, closed) = try halfClosingClient(path: agent.socketPath, bytes: Array(requests.utf8))
        #expect(closed, "the agent did not close after answering")
        let responses = lines.compactMap { try? JSONValue.parse(Array($0.utf8)).objectValue }
        #expect(responses.count == 2)
        #expect(responses.first?["id"] == .int(1))
        #expect(responses.first?["ok"] == .bool(true))
        #expect(responses.last?["id"] == .int(2))
        #expect(responses.last?["doc"]?.objectValue?["s"] == .string(big))
    }

    @Test("an events subscriber that half-closes keeps its stream")
    func halfClosedSubscriberKeepsStream() throws {
        let agent = try AgentProcess()
        try agent.start()
        let writer = try agent.client()
        var wrote = false
        let (lines, _) = try halfClosingClient(path: agent.socketPath, bytes: Array(#"{"id":1,"cmd":"events"}"#.utf8)) { lines in
            // Once the subscription is answered, a write must still reach this half-closed client.
            if !wrote {
                wrote = true
                _ = try? writer.request("put", ["doc": .string("after-half-close"), "body": .object([:])])
            }
            return lines.contains { $0.contains("after-half-close") }
        }
        #expect(lines.first.flatMap { try? JSONValue.parse(Array($0.utf8)).objectValue }?["id"] == .int(1))
        let changed = lines.dropFirst().compactMap { try? JSONValue.parse(Array($0.utf8)).objectValue?["event"]?.objectValue }
            .filter { $0["type"] == .string("document.changed") }
        #expect(changed.contains { $0["data"]?.objectValue?["doc"] == .string("after-half-close") })
    }
}
