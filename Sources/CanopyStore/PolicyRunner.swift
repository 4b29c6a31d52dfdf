import CanopyCore
import Foundation

/// Runs a conflict policy on a loaded document inside a write transaction (`Protocol/design.md` §3): decides
/// with the automatic rule or a resolver, turns the decision into revisions with
/// `ConflictResolution.plan`, and adds them to the tree with their bodies.
enum PolicyRunner {
    /// How a policy left one document: the conflict outcome, the revisions the resolution added
    /// (oldest first), and the conflict as found (nil when the document was not conflicted).
    struct Outcome {
        var resolution: ForeignDocumentResult.Resolution
        var added: [RevisionID]
        var conflict: DetectedConflict?
    }

    /// Applies `policy` to `document` if it is conflicted. `localRevision` is the document's
    /// current revision before the write (nil for a new document or the retry pass).
    static func run(
        _ policy: ConflictPolicy, _ db: Database, _ document: inout StoredDocument, localRevision: RevisionID?
    ) throws -> Outcome {
        let leaves = document.tree.conflictingLeaves
        guard !leaves.isEmpty else { return Outcome(resolution: .notConflicted, added: [], conflict: nil) }
        let strategy: ResolutionStrategy
        var rule: String?
        // Bodies already parsed (for a rule's field), so a resolver's input does not parse them again.
        var parsed: [RevisionID: JSONValue?] = [:]
        // Stored bodies already read (for a rule's field), so keeping a leaf does not read it again.
        var read: [RevisionID: [UInt8]] = [:]
        var resolver: (any ConflictResolver)?
        switch policy {
        case .manual: strategy = .manual
        case .automatic: strategy = .automatic
        case .custom(let custom):
            strategy = .resolver("custom")
            resolver = custom
        case .rules(let rules):
            // A leaf's body is read only when a rule gets to it: an id prefix may decide first,
            // and the first leaf with the field ends the search.
            let names = rules.fieldsRead
            var found: [JSONValue??] = names.isEmpty ? [] : Array(repeating: nil, count: leaves.count)
            (strategy, rule) = try rules.strategy(for: document.id, leafCount: found.count) { index in
                if let known = found[index] { return known }
                let members = try fields(names, of: leaves[index].id, db, document, &parsed, &read)
                found[index] = .some(members)
                return members
            }
            if let name = strategy.resolverName { resolver = rules.resolvers[name] }
        }
        let conflict = DetectedConflict(
            leaves: leaves.map(\.id), rule: rule, strategy: strategy,
            previous: localRevision.flatMap { document.tree.node($0) == nil ? nil : $0 })
        func outcome(_ resolution: ForeignDocumentResult.Resolution, _ added: [RevisionID] = []) -> Outcome {
            Outcome(resolution: resolution, added: added, conflict: conflict)
        }
        switch strategy {
        case .manual: return outcome(.kept)
        case .automatic: return outcome(.resolved, try applyAutomatic(&document, leaves))
        case .localWins, .remoteWins:
            // Decided on the leaves' ids: only the kept leaf's body is read, and only when it is written.
            guard ConflictResolution.needsResolver(among: leaves) else { return outcome(.resolved, try applyAutomatic(&document, leaves)) }
            let ids = leaves.map(\.id)
            let local = localRevision.flatMap { document.tree.isLeaf($0) ? $0 : nil }
            let decision = strategy == .localWins ? BuiltInResolver.localWins(leaves: ids, local: local) : BuiltInResolver.remoteWins(leaves: ids, local: local)
            guard case .keep(let kept) = decision else { preconditionFailure("local-wins and remote-wins keep a leaf") }
            return outcome(.resolved, try keep(kept, &document, conflicting: leaves, db, read: read))
        case .mergeJSON: resolver = BuiltInResolver.mergeJSON
        case .resolver: break
        }
        // Resolvers on two nodes that disagreed produced this conflict: settle it
        // automatically rather than risk an endless exchange.
        guard ConflictResolution.needsResolver(among: leaves) else { return outcome(.resolved, try applyAutomatic(&document, leaves)) }
        guard let resolver else { return outcome(.awaiting(resolver: strategy.resolverName ?? strategy.description)) }
        do {
            return outcome(.resolved, try resolve(
                with: resolver, db, &document, leaves: leaves, localRevision: localRevision, parsed: parsed, read: read))
        } catch let error as ResolverFailure {
            return outcome(.failed(error.description))
        }
    }

    /// Applies the automatic rule (deletes win, then most revisions, then higher hash).
    static func applyAutomatic(_ document: inout StoredDocument, _ conflicting: [RevTree.Node]) throws -> [RevisionID] {
        guard let winner = ConflictResolution.automaticWinner(among: conflicting, in: document.tree) else { return [] }
        return try apply(.keep(winner.id), &document, conflicting: conflicting, bodies: [:])
    }

    /// A resolver threw, or returned a decision the planner refused: the conflict is kept.
    struct ResolverFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Asks `resolver` about `leaves` (with their bodies and the common ancestor's body) and
    /// applies its decision. Throws `ResolverFailure` when the resolver or its decision fails.
    static func resolve(
        with resolver: any ConflictResolver, _ db: Database, _ document: inout StoredDocument,
        leaves: [RevTree.Node], localRevision: RevisionID?, parsed: [RevisionID: JSONValue?] = [:],
        read: [RevisionID: [UInt8]] = [:]
    ) throws -> [RevisionID] {
        let (conflict, bodies) = try describe(
            db, document, leaves: leaves, localRevision: localRevision, parsed: parsed, read: read)
        let decision: ResolutionDecision
        do { decision = try resolver.resolve(conflict) } catch {
            throw ResolverFailure(description: "resolver threw: \(error)")
        }
        do {
            // Planned over every conflicting leaf of the tree, whatever `leaves` held.
            return try apply(decision, &document, bodies: bodies)
        } catch let error as ConflictResolution.PlanError {
            throw ResolverFailure(description: "resolver's decision refused: \(error)")
        }
    }

    /// The conflict among `leaves` as a resolver sees it (bodies, the common ancestor's body, the
    /// node's revision before the write when it is still a leaf), and the leaves' bodies by id.
    /// Bodies already parsed (`parsed`) or read (`read`) for a rule are not read again.
    static func describe(
        _ db: Database, _ document: StoredDocument, leaves: [RevTree.Node], localRevision: RevisionID?,
        parsed: [RevisionID: JSONValue?] = [:], read: [RevisionID: [UInt8]] = [:]
    ) throws -> (Conflict, [RevisionID: JSONValue]) {
        var bodies: [RevisionID: JSONValue] = [:]
        var conflictLeaves: [ConflictLeaf] = []
        for leaf in leaves {
            let body = try parsed[leaf.id]
                ?? read[leaf.id].map { try parse($0, of: leaf.id, document) } ?? parsedBody(db, document, leaf.id)
            if let body { bodies[leaf.id] = body }
            conflictLeaves.append(ConflictLeaf(revision: leaf.id, kind: leaf.kind, body: body))
        }
        let ancestor = document.tree.commonAncestor(of: leaves.map(\.id))
        let conflict = Conflict(
            documentID: document.id, leaves: conflictLeaves,
            commonAncestorBody: try ancestor.flatMap { try parsedBody(db, document, $0) },
            localRevision: localRevision.flatMap { document.tree.isLeaf($0) ? $0 : nil })
        return (conflict, bodies)
    }

    /// Plans `decision` and adds the planned revisions to the tree and the new bodies.
    static func apply(
        _ decision: ResolutionDecision, _ document: inout StoredDocument, conflicting: [RevTree.Node]? = nil,
        bodies: [RevisionID: JSONValue]
    ) throws -> [RevisionID] {
        let plan = try ConflictResolution.plan(
            decision, conflicting: conflicting ?? document.tree.conflictingLeaves, in: document.tree, bodies: bodies)
        return try insert(plan.map { revision in
            let bytes = try InputValidation.canonicalBody(revision.body, encoded: revision.canonicalBody, documentID: document.id)
            return Insertion(id: revision.id, parent: revision.parent, kind: revision.kind, body: bytes)
        }, into: &document)
    }

    /// A planned revision with its canonical body.
    private struct Insertion {
        let id: RevisionID
        let parent: RevisionID
        let kind: RevisionKind
        let body: [UInt8]
    }

    /// Adds planned revisions (each a child of a current leaf) to the tree, with their bodies.
    private static func insert(_ revisions: [Insertion], into document: inout StoredDocument) throws -> [RevisionID] {
        for revision in revisions {
            do {
                try document.tree.insertEdit(id: revision.id, parent: revision.parent, kind: revision.kind)
            } catch {
                throw StoreError.corrupt(detail: "resolution plan for \"\(document.id.prefix(80))\" did not apply: \(error)")
            }
            document.noteAdded(revision.id, body: revision.body)
        }
        return revisions.map(\.id)
    }

    /// Carries out `.keep(id)` as `apply` does, with the same revisions, but copies the kept leaf's
    /// stored bytes into the outcome revision instead of parsing and encoding them again (a
    /// stored body is canonical JSON, so its bytes are what encoding the parsed body gives).
    static func keep(
        _ id: RevisionID, _ document: inout StoredDocument, conflicting: [RevTree.Node], _ db: Database,
        read: [RevisionID: [UInt8]] = [:]
    ) throws -> [RevisionID] {
        guard let winner = ConflictResolution.automaticWinner(among: conflicting, in: document.tree),
            let kept = conflicting.first(where: { $0.id == id }), kept.id != winner.id, !kept.kind.isDeleted
        else { return try apply(.keep(id), &document, conflicting: conflicting, bodies: [:]) }
        guard let bytes = try read[id] ?? RevisionRows.body(db, of: document, revision: id) else {
            throw ConflictResolution.PlanError.bodyUnavailable(id)
        }
        var planned = conflicting.filter { $0.id != winner.id }.map { leaf in
            let closing = ConflictResolution.closing(leaf.id)
            return Insertion(id: closing.id, parent: closing.parent, kind: closing.kind, body: closing.canonicalBody)
        }
        let outcome = RevisionHasher.revisionID(parent: winner.id, kind: .resolvedLive, canonicalBody: bytes)
        planned.append(Insertion(id: outcome, parent: winner.id, kind: .resolvedLive, body: bytes))
        return try insert(planned, into: &document)
    }

    /// The members `names` of a leaf's body, as an object holding only those it has (nil when the
    /// body was dropped), read without parsing the rest; a body the quick reader does not take is
    /// parsed whole and kept in `parsed`.
    private static func fields(
        _ names: Set<String>, of revision: RevisionID, _ db: Database, _ document: StoredDocument,
        _ parsed: inout [RevisionID: JSONValue?], _ read: inout [RevisionID: [UInt8]]
    ) throws -> JSONValue? {
        guard let bytes = try RevisionRows.body(db, of: document, revision: revision) else { return nil }
        read[revision] = bytes
        var members: [String: JSONValue] = [:]
        for name in names {
            switch CanonicalJSONReader.member(name, of: bytes) {
            case .some(.some(let value)): members[name] = value
            case .some(.none): continue
            case .none:
                let body = try parse(bytes, of: revision, document)
                parsed[revision] = body
                return body
            }
        }
        return .object(members)
    }

    /// Carries out a decision that came from outside a policy (a resolver client's answer),
    /// reading only the body it needs: a kept leaf's stored bytes (`keep`), the automatic
    /// winner's body for a merged body (an unchanged body writes nothing), none for a deletion.
    static func apply(
        _ decision: ResolutionDecision, _ document: inout StoredDocument, conflicting: [RevTree.Node], _ db: Database
    ) throws -> [RevisionID] {
        switch decision {
        case .keep(let id):
            return try keep(id, &document, conflicting: conflicting, db)
        case .merged:
            var bodies: [RevisionID: JSONValue] = [:]
            if let winner = ConflictResolution.automaticWinner(among: conflicting, in: document.tree), !winner.kind.isDeleted {
                bodies[winner.id] = try parsedBody(db, document, winner.id)
            }
            return try apply(decision, &document, conflicting: conflicting, bodies: bodies)
        case .delete:
            return try apply(decision, &document, conflicting: conflicting, bodies: [:])
        }
    }

    /// The parsed body of a revision, nil when it was dropped.
    static func parsedBody(_ db: Database, _ document: StoredDocument, _ revision: RevisionID) throws -> JSONValue? {
        guard let bytes = try RevisionRows.body(db, of: document, revision: revision) else { return nil }
        return try parse(bytes, of: revision, document)
    }

    /// `bytes`, the stored body of `revision`, parsed; a body that does not parse is damage.
    private static func parse(_ bytes: [UInt8], of revision: RevisionID, _ document: StoredDocument) throws -> JSONValue {
        do { return try InputValidation.storedBody(bytes, documentID: document.id) } catch {
            throw StoreError.corrupt(detail: "stored body of \"\(document.id.prefix(80))\" \(revision): \(error)")
        }
    }
}
