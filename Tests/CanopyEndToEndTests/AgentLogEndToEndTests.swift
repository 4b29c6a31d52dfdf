import CanopyAgent
import CanopyCore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a real `canopyd` writes to its log at the default level: what an operator acts on, not a
/// line per request.
@Suite("the agent's log at its default level, against a real agent", .serialized)
struct AgentLogEndToEndTests {
    @Test("200 writes at the default log level add no line per request, while a peer added still logs one")
    func writesAddNoLinePerRequest() throws {
        let agent = try AgentProcess()
        // The last --log-level given is the one that counts: the harness's debug, then info.
        try agent.start(extraArguments: ["--log-level", "info"])
        let before = agent.log.split(separator: "\n").count
        let client = try agent.client()
        var revisions: [String: String] = [:]
        for index in 0..<100 {
            let put = try client.request("put", ["doc": .string("doc-\(index % 10)"), "body": .object(["n": .int(Int64(index))]), "rev": revisions["doc-\(index % 10)"].map(JSONValue.string) ?? .null])
            guard case .string(let rev)? = put["rev"] else {
                Issue.record("put failed: \(put)")
                return
            }
            revisions["doc-\(index % 10)"] = rev
        }
        for batch in 0..<50 {
            let docs = (0..<20).map { JSONValue.object(["_id": .string("bulk-\(batch)-\($0)")]) }
            #expect(try client.request("bulk_docs", ["docs": .array(docs)])["written"] == .int(20))
        }
        for index in 0..<10 { #expect(try agent.ctl(["delete", "doc-\(index)", "--rev", revisions["doc-\(index)"]!]).status == 0) }
        for index in 0..<40 { #expect(try agent.ctl(["put", "ctl-\(index)", "--body", #"{"a":1}"#]).status == 0) }
        let added = agent.log.split(separator: "\n").dropFirst(before)
        #expect(added.isEmpty, "\(added.count) lines:\n\(added.joined(separator: "\n"))")

        #expect(try agent.ctl(["peer", "add", testNodeID(9), "-"]).status == 0)
        let afterPeer = agent.log.split(separator: "\n").dropFirst(before)
        #expect(afterPeer.contains { $0.contains("admin peer.add") }, "\(afterPeer.joined(separator: "\n"))")
    }
}
