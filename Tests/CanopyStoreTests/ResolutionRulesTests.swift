import CanopyCore
import Testing
@testable import CanopyStore

/// A document `id` with a local edit and a remote edit of the same first revision: the remote one
/// arrives through `bulkInsertForeign` and makes the conflict. Returns the revisions and the result.
private func makeConflict(
    _ store: DocumentStore, _ id: String, base: JSONValue, local: JSONValue, remote: JSONValue
) throws -> (first: RevisionID, local: RevisionID, remote: RevisionID, result: ForeignDocumentResult) {
    let first = try store.put(id: id, body: base, replacing: nil)
    let mine = try store.put(id: id, body: local, replacing: first)
    let theirs = try foreign(id, parentPath: [first], body: remote)
    let result = try store.bulkInsertForeign([theirs])[0]
    return (first, mine, theirs.path.leaf, result)
}

@Suite("Resolution rules")
struct ResolutionRulesTests {
    /// Notes merge field by field, settings keep the other side's, everything else deletes-win.
    static let rules = ResolutionRules([
        ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
        ResolutionRule(name: "settings", idPrefix: "settings/", strategy: .remoteWins),
        ResolutionRule(name: "reviews", idPrefix: "review:", strategy: .resolver("moderator")),
    ], fallback: .automatic)

    @Test("strategies are written and read back as the config file names them")
    func strategyNames() {
        let all: [ResolutionStrategy] = [.automatic, .localWins, .remoteWins, .mergeJSON, .manual, .resolver("notes-merger.v2")]
        for strategy in all { #expect(ResolutionStrategy(parsing: strategy.description) == strategy) }
        #expect(ResolutionStrategy(parsing: "resolver") == nil)
        #expect(ResolutionStrategy(parsing: "resolver a b") == nil)
        #expect(ResolutionStrategy(parsing: "resolver bad/name") == nil)
        #expect(ResolutionStrategy(parsing: "newest") == nil)
    }

    @Test("the first matching rule wins; a field rule reads the first live leaf that has the field")
    func matching() {
        let note: JSONValue = .object(["type": .string("note")])
        #expect(Self.rules.strategy(for: "settings/x", bodies: [note]) == (.mergeJSON, "notes"))
        #expect(Self.rules.strategy(for: "settings/x", bodies: [.object([:])]) == (.remoteWins, "settings"))
        #expect(Self.rules.strategy(for: "a", bodies: [.object([:]), note]) == (.mergeJSON, "notes"))
        #expect(Self.rules.strategy(for: "a", bodies: [.object(["type": .int(1)]), note]) == (.automatic, nil))
        #expect(Self.rules.strategy(for: "a", bodies: [nil]) == (.automatic, nil))
        let both = ResolutionRule(name: "b", idPrefix: "n:", fieldValue: "note", field: "kind", strategy: .manual)
        #expect(both.matches(id: "n:1", bodies: [.object(["kind": .string("note")])]))
        #expect(!both.matches(id: "n:1", bodies: [note]))
        #expect(!both.matches(id: "m:1", bodies: [.object(["kind": .string("note")])]))
    }

    @Test("rules ask for a leaf's body only when they get to it, and decide as with every body at hand")
    func lazyBodies() {
        let note: JSONValue = .object(["type": .string("note")])
        let other: JSONValue = .object(["type": .string("other")])
        let choices: [JSONValue?] = [nil, .object([:]), note, other]
        // Every id and every three leaves' bodies drawn from `choices`: the lazy form decides the
        // same, and never asks for a body past the first that has the field.
        for id in ["settings/x", "review:1", "a"] {
            for first in choices { for second in choices { for third in choices {
                let bodies = [first, second, third]
                var asked: [Int] = []
                let lazy = Self.rules.strategy(for: id, leafCount: bodies.count) { (index: Int) -> JSONValue? in
                    asked.append(index)
                    return bodies[index]
                }
                #expect(lazy == Self.rules.strategy(for: id, bodies: bodies))
                let decisive = bodies.firstIndex { $0?.objectValue?["type"] != nil }
                #expect(asked.allSatisfy { $0 <= (decisive ?? bodies.count - 1) })
            } } }
        }
        // An id prefix that decides before any field rule asks for no body at all.
        let byPrefix = ResolutionRules([
            ResolutionRule(name: "settings", idPrefix: "settings/", strategy: .remoteWins),
            ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
        ])
        var asked = 0
        let decided = byPrefix.strategy(for: "settings/x", leafCount: 2) { (_: Int) -> JSONValue? in
            asked += 1
            return note
        }
        #expect(decided == (.remoteWins, "settings") && asked == 0)
    }

    @Test("each document's conflict is settled by its rule as it arrives, and says which rule did")
    func perTypeRules() throws {
        let store = try TestStore(.init(conflictPolicy: .rules(Self.rules))).store
        let note = try makeConflict(store, "n1",
            base: .object(["type": .string("note"), "title": .string("t"), "text": .string("a")]),
            local: .object(["type": .string("note"), "title": .string("mine"), "text": .string("a")]),
            remote: .object(["type": .string("note"), "title": .string("t"), "text": .string("theirs")]))
        #expect(note.result.resolution == .resolved)
        #expect(note.result.conflict?.rule == "notes")
        #expect(note.result.conflict?.previous == note.local)
        #expect(try store.get(id: "n1").body == .object(["type": .string("note"), "title": .string("mine"), "text": .string("theirs")]))

        let setting = try makeConflict(store, "settings/theme",
            base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(setting.result.conflict?.settledBy == "settings")
        #expect(try store.get(id: "settings/theme").body == .object(["v": .int(2)]))

        let other = try makeConflict(store, "x", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(other.result.conflict?.settledBy == "automatic")
        #expect(other.result.conflict?.leaves.count == 2)
        #expect(try store.conflictedCount == 0)
    }

    @Test("keeping a leaf by rule writes the revisions the planner writes for the same decision")
    func keptLeafMatchesPlan() throws {
        for (rule, resolver) in [(ResolutionStrategy.remoteWins, BuiltInResolver.remoteWins), (.localWins, BuiltInResolver.localWins)] {
            let byRule = try TestStore(.init(conflictPolicy: .rules(ResolutionRules(fallback: rule)))).store
            let byPlan = try TestStore(.init(conflictPolicy: .custom(resolver))).store
            var currents: [RevisionID] = []
            for store in [byRule, byPlan] {
                let made = try makeConflict(store, "d",
                    base: .object(["v": .int(0)]), local: .object(["v": .int(1), "w": .string("mine")]), remote: .object(["v": .int(2)]))
                #expect(made.result.resolution == .resolved)
                currents.append(made.result.current)
                #expect(try store.revisionTree(id: "d")?.sortedNodes.map(\.id) == byRule.revisionTree(id: "d")?.sortedNodes.map(\.id), "\(rule)")
            }
            #expect(currents[0] == currents[1], "\(rule)")
        }
    }

    @Test("a rule naming a resolver the store does not hold keeps the conflict as waiting; its answer applies in one batch")
    func awaitingAndAnswers() throws {
        let store = try TestStore(.init(conflictPolicy: .rules(Self.rules))).store
        let review = try makeConflict(store, "review:1",
            base: .object(["stars": .int(3)]), local: .object(["stars": .int(4)]), remote: .object(["stars": .int(5)]))
        #expect(review.result.resolution == .awaiting(resolver: "moderator"))
        let second = try makeConflict(store, "review:2",
            base: .object(["stars": .int(1)]), local: .object(["stars": .int(2)]), remote: .object(["stars": .int(3)]))
        #expect(try store.conflictedCount == 2)

        let described = try store.conflicts(ids: ["review:1", "missing", "review:2"])
        #expect(described.map(\.documentID) == ["review:1", "review:2"])
        #expect(Set(described[0].leaves.map(\.revision)) == [review.local, review.remote])
        #expect(described[0].commonAncestorBody == .object(["stars": .int(3)]))

        let notALeaf = RevisionID(generation: 1, digestHigh: 7, digestLow: 7)
        let applied = try store.applyResolutions([
            (id: "review:1", decision: .keep(review.local)),
            (id: "review:2", decision: .keep(notALeaf)),
            (id: "missing", decision: .delete),
        ])
        guard case .success(let current) = applied[0] else { Issue.record("\(applied[0])"); return }
        #expect(try store.get(id: "review:1").revision == current)
        #expect(try store.get(id: "review:1").body == .object(["stars": .int(4)]))
        guard case .failure(.handlerFailed(_, let underlying)) = applied[1] else { Issue.record("\(applied[1])"); return }
        #expect(underlying as? ConflictResolution.PlanError == .notAConflictingLeaf(notALeaf))
        guard case .failure(.notFound) = applied[2] else { Issue.record("\(applied[2])"); return }
        #expect(try store.conflictedDocumentIDs() == ["review:2"])
        _ = second

        // The same answer on another node writes the same revisions: nodes that decide alike agree.
        let twin = try TestStore(.init(conflictPolicy: .rules(Self.rules))).store
        _ = try makeConflict(twin, "review:1",
            base: .object(["stars": .int(3)]), local: .object(["stars": .int(4)]), remote: .object(["stars": .int(5)]))
        guard case .success(let twinCurrent) = try twin.applyResolutions([(id: "review:1", decision: .keep(review.local))])[0] else {
            Issue.record("twin refused"); return
        }
        #expect(twinCurrent == current)
    }

    @Test("a store opened with a policy that can settle kept conflicts settles them; a changed policy applies to the next write")
    func retriedOnOpenAndPolicyChange() throws {
        let test = try TestStore(.init(conflictPolicy: .manual))
        _ = try makeConflict(test.store, "a", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(try test.store.conflictedCount == 1)
        #expect(try test.reopen(.init(conflictPolicy: .manual)).conflictedCount == 1)
        // A retry pass does not know which leaf arrived last: local-wins keeps the current one.
        let current = try test.store.get(id: "a").body
        let reopened = try test.reopen(.init(conflictPolicy: .rules(ResolutionRules(fallback: .localWins))))
        #expect(try reopened.conflictedCount == 0)
        #expect(try reopened.get(id: "a").body == current)

        reopened.conflictPolicy = .manual
        let kept = try makeConflict(reopened, "b", base: .object(["v": .int(0)]), local: .object(["v": .int(1)]), remote: .object(["v": .int(2)]))
        #expect(kept.result.resolution == .kept)
        reopened.conflictPolicy = .rules(ResolutionRules(fallback: .remoteWins))
        #expect(try reopened.retryConflictResolution().map(\.resolution) == [.resolved])
        #expect(try reopened.get(id: "b").body == .object(["v": .int(2)]))
    }
}

/// The worked example of Tools/canopyd/README.md (*Conflict rules and resolvers*), as written there.
private func newest(_ conflict: Conflict) -> ResolutionDecision {
    func updated(_ leaf: ConflictLeaf) -> String {
        if case .string(let time)? = leaf.body?.objectValue?["updated_at"] { return time }
        return ""
    }
    if conflict.leaves.contains(where: \.isDeleted) { return .delete }
    return .keep(conflict.leaves.max { updated($0) < updated($1) }!.revision)
}

@Suite("Resolution rules: the worked example of the agent's reference")
struct ReadmeRulesExampleTests {
    @Test("notes merge field by field, settings keep the newest edit, everything else deletes-win")
    func workedExample() throws {
        let rules = ResolutionRules([
            ResolutionRule(name: "notes", fieldValue: "note", strategy: .mergeJSON),
            ResolutionRule(name: "settings", idPrefix: "settings/", strategy: .resolver("newest")),
        ], fallback: .automatic, resolvers: ["newest": ClosureResolver(newest)])
        let store = try TestStore(.init(conflictPolicy: .rules(rules))).store

        _ = try makeConflict(store, "n",
            base: .object(["type": .string("note"), "a": .int(0), "b": .int(0)]),
            local: .object(["type": .string("note"), "a": .int(1), "b": .int(0)]),
            remote: .object(["type": .string("note"), "a": .int(0), "b": .int(2)]))
        #expect(try store.get(id: "n").body == .object(["type": .string("note"), "a": .int(1), "b": .int(2)]))

        // The older edit arrives last: the newer one stays.
        let setting = try makeConflict(store, "settings/theme",
            base: .object(["v": .string("base"), "updated_at": .string("2026-01-01T00:00:00Z")]),
            local: .object(["v": .string("dark"), "updated_at": .string("2026-03-01T00:00:00Z")]),
            remote: .object(["v": .string("light"), "updated_at": .string("2026-02-01T00:00:00Z")]))
        #expect(setting.result.conflict?.settledBy == "settings")
        #expect(try store.get(id: "settings/theme").body.objectValue?["v"] == .string("dark"))

        let first = try store.put(id: "x", body: .object(["v": .int(0)]), replacing: nil)
        try store.put(id: "x", body: .object(["v": .int(1)]), replacing: first)
        let deletion = try foreign("x", parentPath: [first], kind: .deleted, body: .emptyObject)
        _ = try store.bulkInsertForeign([deletion])
        #expect(try store.get(id: "x").isDeleted)
        #expect(try store.conflictedCount == 0)
    }
}
