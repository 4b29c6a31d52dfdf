import CanopyAgent
import CanopyCore
import Foundation

// What the end-to-end resolver suites share: a resolver on a raw admin connection, an event
// reader, and the agent set-up they start from.

/// A resolver connection that keeps the offers it reads while it waits for a response.
final class RawResolverConnection {
    let client: AdminSocketClient
    private var nextID: Int64 = 1
    private var offers: [[String: JSONValue]] = []

    init(_ agent: AgentProcess, name: String, prefix: String? = nil) throws {
        client = try agent.client()
        var arguments: [String: JSONValue] = ["name": .string(name)]
        if let prefix { arguments["prefix"] = .string(prefix) }
        let registered = try request("resolver.register", arguments)
        guard registered["ok"] == .bool(true) else { throw TimedOut(what: "resolver.register: \(registered)") }
    }

    func request(_ command: String, _ arguments: [String: JSONValue] = [:]) throws -> [String: JSONValue] {
        let id = nextID
        nextID += 1
        try client.sendLine(CanonicalJSON.encode(.object(arguments.merging(["id": .int(id), "cmd": .string(command)]) { $1 })))
        while true {
            let line = try client.readObject()
            if case .object(let offer)? = line["resolve"] { offers.append(offer); continue }
            if line["id"] == .int(id) { return line }
        }
    }

    /// The next offer, in the order the agent sent them.
    func nextOffer() throws -> [String: JSONValue] {
        if !offers.isEmpty { return offers.removeFirst() }
        while true {
            if case .object(let offer)? = try client.readObject()["resolve"] { return offer }
        }
    }

    /// Offers until one for each of `documents` came, by document.
    func offers(for documents: Set<String>) throws -> [String: [String: JSONValue]] {
        var found: [String: [String: JSONValue]] = [:]
        while found.count < documents.count {
            let offer = try nextOffer()
            if case .string(let doc)? = offer["doc"], documents.contains(doc) { found[doc] = offer }
        }
        return found
    }

    func answer(_ offer: [String: JSONValue], _ decision: [String: JSONValue]) throws -> [String: JSONValue] {
        try request("resolver.answer", decision.merging(["ticket": offer["ticket"] ?? .null]) { $1 })
    }
}

/// An agent's event stream, read until an event matches.
final class EventReader {
    let client: AdminSocketClient
    init(_ agent: AgentProcess) throws {
        client = try agent.client()
        _ = try client.request("events")
    }

    /// The data of the next event of `type` for which `matches` holds.
    func next(_ type: String, where matches: ([String: JSONValue]) -> Bool = { _ in true }) throws -> [String: JSONValue] {
        while true {
            guard let event = try client.readObject()["event"]?.objectValue, event["type"] == .string(type),
                let data = event["data"]?.objectValue, matches(data)
            else { continue }
            return data
        }
    }
}

/// Two generation-1 revisions of `id` in one import: a conflict with no peer and no ancestor.
func importConflict(_ agent: AgentProcess, _ id: String, _ first: [String: JSONValue], _ second: [String: JSONValue]) throws {
    let docs: [JSONValue] = [(first, "a"), (second, "b")].map { body, digit in
        .object(body.merging(["_id": .string(id), "_rev": .string("1-" + String(repeating: digit, count: 32))]) { $1 })
    }
    let imported = try agent.client().request("import", ["docs": .array(docs)])
    guard imported["ok"] == .bool(true) else { throw TimedOut(what: "import: \(imported)") }
}
