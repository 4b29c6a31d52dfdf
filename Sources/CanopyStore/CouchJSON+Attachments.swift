import CanopyCore
import Foundation

/// CouchDB's attachments in exported and imported documents: CouchDB writes an attachment's
/// content inline, base64 in its `_attachments` entry's `data` (`GET …?attachments=true`,
/// `_all_docs?include_docs=true&attachments=true`), and takes it back the same way in
/// `_bulk_docs`. Canopy keeps content apart (`AttachmentStore`), so an import stores each inline
/// `data` first and the revision keeps Canopy's stub; an export can put the content back inline.
extension DocumentStore {
    /// The largest attachment content `inliningAttachments` writes inline: 15 MiB, which as
    /// base64 fits one 20 MiB admin line.
    public static let inlineAttachmentBytesMax: Int64 = 15 << 20

    /// `revisions` (read from CouchDB-shape entries) with every inline attachment stored in this
    /// store's attachment directory and its `_attachments` entry replaced by Canopy's stub
    /// (`AttachmentMetadata.json`): `content_type` (default `application/octet-stream`), the
    /// content's BLAKE2b-256 digest and length, and `revpos` (the entry's, else the revision's
    /// generation). An entry that is already a Canopy stub is kept (its content must be here;
    /// the import checks); an empty `_attachments` is dropped, as CouchDB reads it. The pins
    /// returned keep the stored content from compaction until the import has committed.
    ///
    /// Refused, naming the document and attachment: an entry without `data` that is not a Canopy
    /// stub (CouchDB's stubs name content by an MD5 digest this node cannot fetch: export with
    /// `attachments=true`), `data` that is not base64, a `length` that disagrees with it, an
    /// `encoding` other than identity (export without `att_encoding_info`), `follows` (multipart).
    func storingInlineAttachments(
        _ revisions: [CouchJSON.ImportedRevision]
    ) throws(StoreError) -> (revisions: [CouchJSON.ImportedRevision], pins: [AttachmentPin]) {
        var pins: [AttachmentPin] = []
        var result: [CouchJSON.ImportedRevision] = []
        result.reserveCapacity(revisions.count)
        for revision in revisions {
            guard case .object(var members) = revision.body, let member = members[Attachments.member] else {
                result.append(revision)
                continue
            }
            let id = revision.documentID
            let refuse = { (detail: String) -> StoreError in .invalidInput(.invalidAttachments(documentID: id, detail: detail)) }
            guard case .object(let entries) = member else { throw refuse("_attachments is not an object") }
            var stubs: [String: JSONValue] = [:]
            for (name, entry) in entries.sorted(by: { $0.key < $1.key }) {
                stubs[name] = try stub(name, entry, of: id, generation: revision.path.leaf.generation, pins: &pins)
            }
            members[Attachments.member] = stubs.isEmpty ? nil : .object(stubs)
            result.append(CouchJSON.ImportedRevision(documentID: id, path: revision.path, body: .object(members)))
        }
        return (result, pins)
    }

    /// One `_attachments` entry of an imported revision as Canopy's stub, its inline content
    /// stored and pinned (see `storingInlineAttachments`).
    private func stub(
        _ name: String, _ entry: JSONValue, of id: String, generation: Int, pins: inout [AttachmentPin]
    ) throws(StoreError) -> JSONValue {
        let refuse = { (detail: String) -> StoreError in
            .invalidInput(.invalidAttachments(documentID: id, detail: "attachment \"\(name.prefix(80))\": \(detail)"))
        }
        guard case .object(let fields) = entry else { throw refuse("not an object") }
        guard case .string(let text)? = fields["data"] else {
            if (try? Attachments.metadata(entry, name: name)) != nil { return entry }
            throw refuse("no inline data (a CouchDB stub names content this node cannot fetch): export from CouchDB with attachments=true")
        }
        if let encoding = fields["encoding"], encoding != .string("identity") {
            throw refuse("encoding \(encoding) is not supported: export without att_encoding_info")
        }
        guard fields["follows"] == nil else { throw refuse("follows (multipart) is not supported: export with inline data") }
        guard let content = Data(base64Encoded: text) else { throw refuse("data is not base64") }
        if let length = fields["length"], length != .int(Int64(content.count)) {
            throw refuse("length \(length) but the data holds \(content.count) bytes")
        }
        let contentType = Self.text(fields["content_type"]) ?? "application/octet-stream"
        var revpos = generation
        if case .int(let given)? = fields["revpos"], (1...Int64(generation)).contains(given) { revpos = Int(given) }
        let upload = try attachments.beginUpload(length: Int64(content.count), from: "attachment \"\(name.prefix(80))\" of \"\(id.prefix(80))\"")
        do { try content.withUnsafeBytes { try upload.write($0) } } catch let error as StoreError { throw error } catch {
            throw .attachment("\(error)")
        }
        let stored = try upload.finishPinned()
        pins.append(stored.pin)
        return AttachmentMetadata(contentType: contentType, length: stored.length, digest: stored.digest, revpos: revpos).json
    }

    /// `document` (a CouchDB-shape revision) with each attachment's content inline, base64 in
    /// `data`, as CouchDB exports with `attachments=true`; the stub's other members stay (CouchDB
    /// ignores a `digest` it did not make). Content is checked against its digest as it is read.
    ///
    /// Content over `inlineAttachmentBytesMax` is refused, naming it: inline content is held
    /// whole in memory and travels in one JSON line (the admin socket's are at most 20 MiB).
    public func inliningAttachments(_ document: JSONValue) throws(StoreError) -> JSONValue {
        guard case .object(var members) = document, case .object(let entries)? = members[Attachments.member] else { return document }
        let id = Self.text(members["_id"]) ?? ""
        let named: [String: AttachmentMetadata]
        do { named = try Attachments.metadata(in: .object([Attachments.member: .object(entries)])) } catch {
            throw .corrupt(detail: "stored attachments of \"\(id.prefix(80))\": \(error)")
        }
        var inline: [String: JSONValue] = [:]
        for (name, metadata) in named {
            guard metadata.length <= Self.inlineAttachmentBytesMax else {
                throw .attachment("attachment \"\(name.prefix(80))\" of \"\(id.prefix(80))\" has \(metadata.length) bytes, too many to write inline (at most \(Self.inlineAttachmentBytesMax)); copy it with `canopyctl attachment` and `canopyctl attach`")
            }
            var content = Data(capacity: Int(metadata.length))
            do {
                try attachments.read(metadata.digest) { part in content.append(contentsOf: part) }
            } catch let error as StoreError {
                throw error
            } catch {
                throw .attachment("\(error)")
            }
            var fields = metadata.json.objectValue ?? [:]
            fields["stub"] = nil
            fields["data"] = .string(content.base64EncodedString())
            inline[name] = .object(fields)
        }
        members[Attachments.member] = .object(inline)
        return .object(members)
    }

    /// The string `value` holds, if it is one.
    private static func text(_ value: JSONValue?) -> String? {
        if case .string(let text)? = value { return text }
        return nil
    }
}
