import CanopyCore
import Foundation
@testable import CanopyStore

/// A fresh directory under the system temp dir, removed when the value is deinitialised.
final class TemporaryDirectory {
    let url: URL

    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-store-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// A path inside the directory.
    func path(_ name: String) -> String { url.appendingPathComponent(name).path }
}

/// A store on a real file in its own temporary directory (kept alive with it).
struct TestStore {
    let directory: TemporaryDirectory
    let store: DocumentStore
    var path: String { directory.path("store.sqlite") }

    init(_ configuration: DocumentStore.Configuration = .init()) throws {
        directory = TemporaryDirectory()
        store = try DocumentStore(path: directory.path("store.sqlite"), configuration: configuration)
    }

    /// Opens a second store object on the same file (as after a restart).
    func reopen(_ configuration: DocumentStore.Configuration = .init()) throws -> DocumentStore {
        try DocumentStore(path: path, configuration: configuration)
    }
}

/// `{"n": n, "text": text}`.
func body(_ n: Int, _ text: String = "x") -> JSONValue {
    .object(["n": .int(Int64(n)), "text": .string(text)])
}

/// A foreign revision made the way a peer makes it: content-hashed from its parent.
func foreign(
    _ documentID: String, parentPath: [RevisionID] = [], kind: RevisionKind = .live, body: JSONValue
) throws -> ForeignRevision {
    let leaf = RevisionHasher.revisionID(parent: parentPath.first, kind: kind, body: body)
    let path = try RevisionPath(leaf: leaf, kind: kind, ancestors: parentPath)
    return ForeignRevision(documentID: documentID, path: path, body: .canonical(CanonicalJSON.encode(body)))
}

/// A chain of `count` live revisions, newest first, as a peer would hold it.
func chain(_ count: Int, seed: String = "a") -> [(id: RevisionID, body: JSONValue)] {
    var result: [(RevisionID, JSONValue)] = []
    var parent: RevisionID? = nil
    for n in 1...count {
        let value = body(n, seed)
        let id = RevisionHasher.revisionID(parent: parent, kind: .live, body: value)
        result.append((id, value))
        parent = id
    }
    return result.reversed()
}

/// A random foreign revision of `documentID`: a chain of `chainLengths` revisions from one of
/// `seeds` seeds, sometimes ending in a deletion, sometimes cut above its oldest revision
/// (`rootParent`).
func randomForeign(
    _ documentID: String, chainLengths: ClosedRange<Int>, seeds: UInt64, _ random: inout SplitMix64
) throws -> ForeignRevision {
    let links = chain(Int.random(in: chainLengths, using: &random), seed: "s\(random.next() % seeds)")
    if random.next() % 6 == 0 {
        return try foreign(documentID, parentPath: links.map(\.id), kind: .deleted, body: .emptyObject)
    }
    var ancestors = links.dropFirst().map(\.id)
    var rootParent: RevisionID? = nil
    if !ancestors.isEmpty, random.next() % 4 == 0 { rootParent = ancestors.removeLast() }
    let path = try RevisionPath(leaf: links[0].id, kind: .live, ancestors: ancestors, rootParent: rootParent)
    return ForeignRevision(documentID: documentID, path: path, body: .value(links[0].body))
}

/// Every row of `documents` (by sequence) and `revisions` (by key), each column's bytes spelled
/// out: two stores that wrote the same things compare equal.
func storeRows(_ path: String) throws -> [String] {
    let db = try Database(path: path)
    func spell(_ row: Statement, columns: Int32) -> String {
        (0..<columns).map { column in row.blob(column).map { $0.map(String.init).joined(separator: ".") } ?? "null" }
            .joined(separator: "|")
    }
    let documents = try db.query("SELECT * FROM documents ORDER BY sequence") { spell($0, columns: 8) }
    let revisions = try db.query("SELECT * FROM revisions ORDER BY doc_key, generation, digest") { spell($0, columns: 8) }
    return documents + revisions
}

/// `bytes` stored in `attachments` through an upload, returned pinned.
func stored(_ bytes: [UInt8], in attachments: AttachmentStore) throws(StoreError) -> (digest: AttachmentDigest, length: Int64, pin: AttachmentPin) {
    let upload = try attachments.beginUpload(length: Int64(bytes.count), from: "a test")
    for byte in bytes { try withUnsafeBytes(of: byte) { raw throws(StoreError) in try upload.write(raw) } }
    return try upload.finishPinned()
}

/// `bytes` stored in `attachments`, not pinned.
func storedUnpinned(_ bytes: [UInt8], in attachments: AttachmentStore) throws -> AttachmentDigest {
    let content = try stored(bytes, in: attachments)
    content.pin.release()
    return content.digest
}

/// `{"n": n}` naming `digest` (of `bytes`) as attachment `name`.
func naming(_ digest: AttachmentDigest, of bytes: [UInt8], as name: String = "a", n: Int = 1) -> JSONValue {
    let stub = AttachmentMetadata(contentType: "application/octet-stream", length: Int64(bytes.count), digest: digest, revpos: 1)
    return Attachments.body(.object(["n": .int(Int64(n))]), with: [name: stub])
}
