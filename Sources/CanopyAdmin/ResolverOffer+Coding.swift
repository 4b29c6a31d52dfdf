import CanopyCore
import CanopyReplication

/// A resolver offer's members (Protocol/admin-v1.md §5, *Resolvers*):
///
///     {"ticket":T,"resolver":NAME,"db":DB,"doc":ID,"rev":CURRENT,
///      "leaves":[{"rev":R,"deleted":false,"body":{…}},…],
///      "ancestor":{…}|null,"local_rev":R|null,"node_id":PEER|null,"rule":RULE|null}
///
/// `doc`, `leaves`, `ancestor` and `local_rev` are the offer's `conflict`; `rev` is its first
/// leaf's (the current revision), written for people and scripts and not read back. An offer
/// without a leaf does not decode; a line without `db` is the `default` database's.
extension ResolverOffer: Codable, AdminExplicitNulls {
    private struct Members: Codable, AdminExplicitNulls {
        struct Leaf: Codable, AdminExplicitNulls {
            var rev: RevisionID
            var deleted: Bool?
            /// Null when the agent no longer stores it; `{}` for a deletion.
            var body: JSONValue?
        }

        var ticket: Int64
        var resolver: String
        var db: String?
        var doc: String
        var rev: RevisionID?
        var leaves: [Leaf]
        var ancestor: JSONValue?
        var localRev: RevisionID?
        var nodeID: String?
        var rule: String?
    }

    public init(from decoder: any Decoder) throws {
        let members = try Members(from: decoder)
        guard !members.leaves.isEmpty else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "an offer names at least one leaf"))
        }
        let leaves = members.leaves.map { ConflictLeaf(revision: $0.rev, kind: $0.deleted == true ? .deleted : .live, body: $0.body) }
        self.init(
            ticket: members.ticket, resolver: members.resolver,
            conflict: Conflict(documentID: members.doc, leaves: leaves, commonAncestorBody: members.ancestor, localRevision: members.localRev),
            peer: members.nodeID, rule: members.rule, database: members.db ?? DatabaseName.default.text)
    }

    public func encode(to encoder: any Encoder) throws {
        try Members(
            ticket: ticket, resolver: resolver, db: database, doc: conflict.documentID, rev: conflict.leaves.first?.revision,
            leaves: conflict.leaves.map { Members.Leaf(rev: $0.revision, deleted: $0.isDeleted, body: $0.body) },
            ancestor: conflict.commonAncestorBody, localRev: conflict.localRevision, nodeID: peer, rule: rule
        ).encode(to: encoder)
    }

    /// The offer's line, `{"resolve":{…}}`.
    public var line: JSONValue {
        do {
            return .object(["resolve": try JSONValueEncoder().encode(self)])
        } catch {
            preconditionFailure("an offer always encodes: \(error)")
        }
    }
}
