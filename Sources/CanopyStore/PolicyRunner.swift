import CanopyCore
import Foundation

/// Runs a conflict policy on a loaded document inside a write transaction (`Protocol/design.md` §3): decides
/// with the automatic rule or a resolver, turns the decision into revisions with
/// `ConflictResolution.plan`, and adds them to the tree with their bodies.
enum PolicyRunner {
    /// Applies `policy` to `document` if it is conflicted. Returns how the conflict stands and
    /// the revisions the resolution added (oldest first).
    static func run(
        _ policy: ConflictPolicy, _ db: Database, _ document: inout StoredDocument, localRevision: RevisionID?
    ) throws -> (ForeignDocumentResult.Resolution, [RevisionID]) {
        guard document.tree.isConflicted else { return (.notConflicted, []) }
        switch policy {
        case .manual:
            return (.kept, [])
        case .automatic:
            return (.resolved, try applyAutomatic(&document))
        case .custom(let resolver):
            // Resolvers on two nodes that disagreed produced this conflict: settle it
            // automatically rather than risk an endless exchange.
            guard ConflictResolution.needsResolver(document.tree) else { return (.resolved, try applyAutomatic(&document)) }
            let leaves = document.tree.conflictingLeaves
            do {
                let added = try resolve(with: resolver, db, &document, leaves: leaves, localRevision: localRevision)
                return (.resolved, added)
            } catch let error as ResolverFailure {
                return (.failed(error.description), [])
            }
        }
    }

    /// Applies the automatic rule (deletes win, then most revisions, then higher hash).
    static func applyAutomatic(_ document: inout StoredDocument) throws -> [RevisionID] {
        guard let decision = ConflictResolution.automaticDecision(for: document.tree) else { return [] }
        return try apply(decision, &document, bodies: [:])
    }

    /// A resolver threw, or returned a decision the planner refused: the conflict is kept.
    struct ResolverFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Asks `resolver` about `leaves` (with their bodies and the common ancestor's body) and
    /// applies its decision. Throws `ResolverFailure` when the resolver or its decision fails.
    static func resolve(
        with resolver: any ConflictResolver, _ db: Database, _ document: inout StoredDocument,
        leaves: [RevTree.Node], localRevision: RevisionID?
    ) throws -> [RevisionID] {
        var bodies: [RevisionID: JSONValue] = [:]
        var conflictLeaves: [ConflictLeaf] = []
        for leaf in leaves {
            let body = try parsedBody(db, document, leaf.id)
            if let body { bodies[leaf.id] = body }
            conflictLeaves.append(ConflictLeaf(revision: leaf.id, kind: leaf.kind, body: body))
        }
        let ancestor = document.tree.commonAncestor(of: leaves.map(\.id))
        let conflict = Conflict(
            documentID: document.id, leaves: conflictLeaves,
            commonAncestorBody: try ancestor.flatMap { try parsedBody(db, document, $0) },
            localRevision: localRevision.flatMap { document.tree.isLeaf($0) ? $0 : nil })
        let decision: ResolutionDecision
        do { decision = try resolver.resolve(conflict) } catch {
            throw ResolverFailure(description: "resolver threw: \(error)")
        }
        do {
            return try apply(decision, &document, bodies: bodies)
        } catch let error as ConflictResolution.PlanError {
            throw ResolverFailure(description: "resolver's decision refused: \(error)")
        }
    }

    /// Plans `decision` and adds the planned revisions to the tree and the new bodies.
    static func apply(
        _ decision: ResolutionDecision, _ document: inout StoredDocument, bodies: [RevisionID: JSONValue]
    ) throws -> [RevisionID] {
        let plan = try ConflictResolution.plan(decision, tree: document.tree, bodies: bodies)
        var added: [RevisionID] = []
        for revision in plan {
            let bytes = try InputValidation.canonicalBody(revision.body, documentID: document.id)
            do {
                try document.tree.insertEdit(id: revision.id, parent: revision.parent, kind: revision.kind)
            } catch {
                throw StoreError.corrupt(detail: "resolution plan for \"\(document.id.prefix(80))\" did not apply: \(error)")
            }
            document.noteAdded(revision.id, body: bytes)
            added.append(revision.id)
        }
        return added
    }

    /// The parsed body of a revision, nil when it was dropped.
    private static func parsedBody(_ db: Database, _ document: StoredDocument, _ revision: RevisionID) throws -> JSONValue? {
        guard let bytes = try RevisionRows.body(db, of: document, revision: revision) else { return nil }
        do { return try InputValidation.storedBody(bytes, documentID: document.id) } catch {
            throw StoreError.corrupt(detail: "stored body of \"\(document.id.prefix(80))\" \(revision): \(error)")
        }
    }
}
