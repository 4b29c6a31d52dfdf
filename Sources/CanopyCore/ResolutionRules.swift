/// How one conflicted document is settled, as a rule or the catch-all names it.
public enum ResolutionStrategy: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// Deletes win, then most revisions win (`ConflictResolution.automaticWinner`).
    case automatic
    /// The node's own current revision wins (`BuiltInResolver.localWins`).
    case localWins
    /// The other side's revision wins (`BuiltInResolver.remoteWins`).
    case remoteWins
    /// A three-way, field-by-field merge against the common ancestor (`BuiltInResolver.mergeJSON`).
    case mergeJSON
    /// The conflict is kept until someone resolves it by hand.
    case manual
    /// An application resolver with this name decides: in the library, one of
    /// `ResolutionRules.resolvers`; in the agent, a client registered over the admin socket. Until
    /// it answers, the conflict is kept and counted as waiting for it.
    case resolver(String)

    /// The names a config file uses: `automatic`, `local-wins`, `remote-wins`, `merge-json`,
    /// `manual`, `resolver NAME`.
    public var description: String {
        switch self {
        case .automatic: "automatic"
        case .localWins: "local-wins"
        case .remoteWins: "remote-wins"
        case .mergeJSON: "merge-json"
        case .manual: "manual"
        case .resolver(let name): "resolver \(name)"
        }
    }

    /// Parses a strategy as `description` writes it; nil for anything else. A resolver name is
    /// 1–64 characters of letters, digits, `-`, `_` and `.`.
    public init?(parsing text: some StringProtocol) {
        let words = text.split(separator: " ", omittingEmptySubsequences: true)
        switch (words.first, words.count) {
        case ("automatic", 1): self = .automatic
        case ("local-wins", 1): self = .localWins
        case ("remote-wins", 1): self = .remoteWins
        case ("merge-json", 1): self = .mergeJSON
        case ("manual", 1): self = .manual
        case ("resolver", 2):
            let name = String(words[1])
            guard Self.isValidResolverName(name) else { return nil }
            self = .resolver(name)
        default: return nil
        }
    }

    /// True for a usable resolver name: 1–64 of `[A-Za-z0-9._-]`.
    public static func isValidResolverName(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == 0x2D || byte == 0x5F || byte == 0x2E
            }
    }

    /// The resolver's name for `.resolver`, nil otherwise.
    public var resolverName: String? {
        if case .resolver(let name) = self { return name }
        return nil
    }
}

/// One resolution rule: which documents it covers (an id prefix, a body field's value, or both)
/// and how their conflicts are settled.
public struct ResolutionRule: Sendable, Equatable {
    /// The rule's name, reported as `by` when it settles a conflict.
    public var name: String
    /// Documents whose id starts with this (nil: any id).
    public var idPrefix: String?
    /// Documents whose body has `field` equal to this string (nil: any body).
    public var fieldValue: String?
    /// The body member `fieldValue` is compared with.
    public var field: String
    /// How a matching conflict is settled.
    public var strategy: ResolutionStrategy

    /// The body member rules match on unless they name another.
    public static let defaultField = "type"

    /// A rule; give at least one of `idPrefix` and `fieldValue` (a rule with neither matches every
    /// document, which is what the catch-all is for).
    public init(name: String, idPrefix: String? = nil, fieldValue: String? = nil, field: String = ResolutionRule.defaultField, strategy: ResolutionStrategy) {
        self.name = name
        self.idPrefix = idPrefix
        self.fieldValue = fieldValue
        self.field = field
        self.strategy = strategy
    }

    /// Whether the rule covers the document `id` whose leaves have `bodies` (canonical order, the
    /// current revision first): the id has the prefix, and the first live body that has the field
    /// holds `fieldValue` there as a string.
    public func matches(id: String, bodies: [JSONValue?]) -> Bool {
        matches(id: id, leafCount: bodies.count) { bodies[$0] }
    }

    /// `matches(id:bodies:)` with the bodies asked for one at a time, in order, and only as far
    /// as the match needs them: none when the id decides, and none past the first that has the
    /// field.
    public func matches<Failure: Error>(
        id: String, leafCount: Int, body: (Int) throws(Failure) -> JSONValue?
    ) throws(Failure) -> Bool {
        if let idPrefix, !id.hasPrefix(idPrefix) { return false }
        guard let fieldValue else { return true }
        for index in 0..<leafCount {
            guard let member = try body(index)?.objectValue?[field] else { continue }
            return member == .string(fieldValue)
        }
        return false
    }
}

/// An ordered list of resolution rules, first match wins, and the catch-all for documents no rule
/// covers: what the agent's config file and the library's `ConflictPolicy.rules` hold.
///
/// A rule that names a resolver settles with the matching entry of `resolvers` (the library's
/// in-process resolvers); with none of that name, the conflict is kept as waiting for it (the
/// agent's resolvers are processes connected over its admin socket).
public struct ResolutionRules: Sendable {
    /// The rules, first match wins.
    public var rules: [ResolutionRule] {
        didSet { fieldsRead = Self.fields(of: rules) }
    }
    /// How a conflict no rule covers is settled (the agent's `conflicts` setting).
    public var fallback: ResolutionStrategy
    /// In-process resolvers by name, for `.resolver(NAME)` strategies.
    public var resolvers: [String: any ConflictResolver]

    /// Rules with a catch-all.
    public init(_ rules: [ResolutionRule] = [], fallback: ResolutionStrategy = .automatic, resolvers: [String: any ConflictResolver] = [:]) {
        self.rules = rules
        self.fieldsRead = Self.fields(of: rules)
        self.fallback = fallback
        self.resolvers = resolvers
    }

    /// The body members rules look at: a match needs only these of each leaf's body (none: a
    /// match reads no body).
    /// Kept with the rules, not built per conflict.
    public private(set) var fieldsRead: Set<String>

    private static func fields(of rules: [ResolutionRule]) -> Set<String> {
        Set(rules.filter { $0.fieldValue != nil }.map(\.field))
    }

    /// The first rule covering the document, or nil when the catch-all applies.
    public func rule(for id: String, bodies: [JSONValue?]) -> ResolutionRule? {
        rules.first { $0.matches(id: id, bodies: bodies) }
    }

    /// The strategy for the document, and the name of the rule that chose it (nil: the catch-all).
    public func strategy(for id: String, bodies: [JSONValue?]) -> (strategy: ResolutionStrategy, rule: String?) {
        strategy(for: id, leafCount: bodies.count) { bodies[$0] }
    }

    /// `strategy(for:bodies:)` with the leaves' bodies asked for only as the rules need them
    /// (see `ResolutionRule.matches(id:leafCount:body:)`); a body may be asked for more than once.
    public func strategy<Failure: Error>(
        for id: String, leafCount: Int, body: (Int) throws(Failure) -> JSONValue?
    ) throws(Failure) -> (strategy: ResolutionStrategy, rule: String?) {
        for rule in rules where try rule.matches(id: id, leafCount: leafCount, body: body) { return (rule.strategy, rule.name) }
        return (fallback, nil)
    }
}
