import Canopy

struct Note: Codable, Sendable {
    var title: String
}

// Usage: notes-app DIRECTORY — two nodes under DIRECTORY; B replicates A's note over encrypted TCP.
let directory = CommandLine.arguments.dropFirst().first ?? "notes-app-data"
let a = try Node(directory: directory + "/a")
let b = try Node(directory: directory + "/b")
try await a.database.save(Note(title: "Hello from A"), id: "note:1")
a.replicator(ReplicatorConfiguration(peer: b.nodeID)).start()
let replicator = b.replicator(ReplicatorConfiguration(peer: a.nodeID, address: a.listenAddress))
let status = replicator.status
replicator.start()
for await state in status {
    print("replicator:", state)
    if state == .idle { break }
}
print(try await b.database.document(id: "note:1", as: Note.self)?.title ?? "missing")
replicator.stop()
await b.stop()
await a.stop()
