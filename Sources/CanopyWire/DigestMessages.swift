import CanopyCore

/// The digest messages (§6.13): a node asks its peer what it holds under nodes of the digest
/// tree (`Protocol/digests.md` §6) to find where their documents differ. Only between sides that
/// both set the `digests` feature bit in `hello`.
///
/// `digestGet`: `varint requestID ‖ string prefix (0...docIDBytesMax) ‖ varint count
/// (1...digestNodesMax) ‖ count × (u8 length (0...3) ‖ length bytes)` — the answers for those
/// nodes, over the documents whose id starts with `prefix`.
public struct DigestGet: WireMessageBody {
    public static let messageType = MessageType.digestGet
    public var requestID: RequestID
    /// The id prefix the asker compares under; empty for every document.
    public var prefix: String
    /// 1…`digestNodesMax` nodes.
    public var nodes: [DigestNodePath]

    public init(requestID: RequestID, prefix: String, nodes: [DigestNodePath]) {
        self.requestID = requestID
        self.prefix = prefix
        self.nodes = nodes
    }

    public func encode(into writer: inout ByteWriter) {
        precondition((1...WireLimits.digestNodesMax).contains(nodes.count), "digestGet asks for 1...digestNodesMax nodes")
        writer.writeVarint(requestID)
        writer.writeString(prefix, maxBytes: WireLimits.docIDBytesMax)
        writer.writeVarint(UInt64(nodes.count))
        for node in nodes { writer.writeNodePath(node) }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("digestGet.requestID")
        prefix = try reader.readString("digestGet.prefix", in: 0...WireLimits.docIDBytesMax)
        let count = try reader.readVarint("digestGet.count", in: 1...WireLimits.digestNodesMax)
        var nodes: [DigestNodePath] = []
        nodes.reserveCapacity(count)
        for _ in 0..<count { nodes.append(try reader.readNodePath("digestGet.node")) }
        self.nodes = nodes
    }
}

/// `digestNodes` (the reply to `digestGet`): `varint requestID ‖ string prefix ‖ varint count
/// (1...the nodes asked) ‖ count × answer`, the answers for the first `count` nodes asked, in
/// their order. `prefix` is the one the answers cover: the asked prefix or the longer prefix the
/// answering side shares with the asker. An answer is `u8 0 ‖ varint children (0...256) ‖
/// children × (u8 index ‖ varint documents (≥ 1) ‖ 32 bytes digest)` in ascending index order,
/// or `u8 1 ‖ varint documents (0...digestDocumentsMax) ‖ documents × (string id
/// (1...docIDBytesMax) ‖ varint leaves (1...entryRevisionsMax) ‖ leaves × (varint(generation ×
/// 2 + deleted) ‖ 16 bytes digest))`, documents in ascending id order, leaves in ascending
/// revision order.
public struct DigestNodes: WireMessageBody {
    public static let messageType = MessageType.digestNodes
    public var requestID: RequestID
    public var prefix: String
    public var answers: [DigestNodeAnswer]

    public init(requestID: RequestID, prefix: String, answers: [DigestNodeAnswer]) {
        self.requestID = requestID
        self.prefix = prefix
        self.answers = answers
    }

    public func encode(into writer: inout ByteWriter) {
        precondition(!answers.isEmpty && answers.count <= WireLimits.digestNodesMax, "digestNodes answers 1...digestNodesMax nodes")
        writer.writeVarint(requestID)
        writer.writeString(prefix, maxBytes: WireLimits.docIDBytesMax)
        writer.writeVarint(UInt64(answers.count))
        for answer in answers {
            switch answer {
            case .children(let children):
                writer.writeByte(0)
                writer.writeVarint(UInt64(children.count))
                for child in children {
                    writer.writeByte(child.index)
                    writer.writeVarint(child.documents)
                    writer.writeRaw(child.digest.bytes)
                }
            case .documents(let documents):
                precondition(documents.count <= WireLimits.digestDocumentsMax, "more documents than a digest answer lists")
                writer.writeByte(1)
                writer.writeVarint(UInt64(documents.count))
                for document in documents {
                    writer.writeString(document.id, maxBytes: WireLimits.docIDBytesMax)
                    writer.writeVarint(UInt64(document.leaves.count))
                    for leaf in document.leaves {
                        writer.writeVarint(UInt64(leaf.revision.generation) << 1 | (leaf.deleted ? 1 : 0))
                        writer.writeDigest(of: leaf.revision)
                    }
                }
            }
        }
    }

    public init(from reader: inout ByteReader) throws(ProtocolError) {
        requestID = try reader.readRequestID("digestNodes.requestID")
        prefix = try reader.readString("digestNodes.prefix", in: 0...WireLimits.docIDBytesMax)
        let count = try reader.readVarint("digestNodes.count", in: 1...WireLimits.digestNodesMax)
        var answers: [DigestNodeAnswer] = []
        for _ in 0..<count {
            switch try reader.readByte("digestNodes.kind") {
            case 0:
                let childCount = try reader.readVarint("digestNodes.children", in: 0...256)
                var children: [DigestChild] = []
                children.reserveCapacity(childCount)
                for _ in 0..<childCount {
                    let index = try reader.readByte("digestNodes.child.index")
                    if let last = children.last, index <= last.index {
                        throw .invalidValue(field: "digestNodes.child.index (not ascending)", value: UInt64(index))
                    }
                    let documents = try reader.readVarint("digestNodes.child.documents")
                    guard documents >= 1 else {
                        throw .outOfRange(field: "digestNodes.child.documents", value: 0, min: 1, max: UInt64.max)
                    }
                    let digest = DatabaseDigest(bytes: try reader.readRaw(32, "digestNodes.child.digest"))!
                    children.append(DigestChild(index: index, documents: documents, digest: digest))
                }
                answers.append(.children(children))
            case 1:
                let documentCount = try reader.readVarint("digestNodes.documents", in: 0...WireLimits.digestDocumentsMax)
                var documents: [DigestDocument] = []
                documents.reserveCapacity(documentCount)
                for _ in 0..<documentCount {
                    let id = try reader.readString("digestNodes.document.id", in: 1...WireLimits.docIDBytesMax)
                    if let last = documents.last, id <= last.id {
                        throw .invalidValue(field: "digestNodes.document.id (not ascending), document", value: UInt64(documents.count))
                    }
                    let leafCount = try reader.readVarint("digestNodes.document.leaves", in: 1...WireLimits.entryRevisionsMax)
                    var leaves: [DigestLeaf] = []
                    leaves.reserveCapacity(leafCount)
                    for _ in 0..<leafCount {
                        let key = try reader.readVarint("digestNodes.leaf")
                        let generation = key >> 1
                        guard generation >= 1, generation <= UInt64(RevisionID.generationMax) else {
                            throw .invalidRevisionGeneration(field: "digestNodes.leaf", generation: generation)
                        }
                        let digest = try reader.readDigest("digestNodes.leaf")
                        let leaf = DigestLeaf(revision: digest.revisionID(generation: Int(generation)), deleted: key & 1 == 1)
                        if let last = leaves.last, !(last < leaf) {
                            throw .invalidValue(field: "digestNodes.leaf (not ascending), leaf", value: UInt64(leaves.count))
                        }
                        leaves.append(leaf)
                    }
                    documents.append(DigestDocument(id: id, leaves: leaves))
                }
                answers.append(.documents(documents))
            case let kind:
                throw .invalidValue(field: "digestNodes.kind", value: UInt64(kind))
            }
        }
        self.answers = answers
    }
}

extension ByteWriter {
    mutating func writeNodePath(_ path: DigestNodePath) {
        writeByte(UInt8(path.bytes.count))
        writeRaw(path.bytes)
    }
}

extension ByteReader {
    mutating func readNodePath(_ field: String) throws(ProtocolError) -> DigestNodePath {
        let count = try readByte(field + ".length")
        guard count <= UInt8(DigestTree.pathBytesMax) else {
            throw .outOfRange(field: field + ".length", value: UInt64(count), min: 0, max: UInt64(DigestTree.pathBytesMax))
        }
        return DigestNodePath(bytes: Array(try readRaw(Int(count), field)))!
    }
}
