import CanopyCore

// MARK: Resolvers

extension Admin {
    /// `resolver.register {name?, prefix?}`: makes the connection the resolver `name` (default
    /// `default`) for the conflicts its rules keep for it; offers then come on the connection as
    /// `{"resolve": {…}}` lines.
    public struct RegisterResolver: AdminCommand {
        public static let name = "resolver.register"
        public var name: String?
        /// Only conflicts of documents whose id starts with it.
        public var prefix: String?

        public init(name: String? = nil, prefix: String? = nil) {
            self.name = name
            self.prefix = prefix
        }

        public struct Reply: Codable, Sendable, Equatable, AdminExplicitNulls {
            public var name: String
            public var prefix: String?

            public init(name: String, prefix: String?) {
                self.name = name
                self.prefix = prefix
            }
        }
    }

    /// `resolver.answer {ticket, pick | body | delete}`: a registered resolver's answer to the
    /// offer `ticket`. The reply comes once the answer is written.
    public struct AnswerResolver: AdminCommand {
        public static let name = "resolver.answer"
        /// Optional here only so that a missing one is refused in the protocol's words.
        public var ticket: Int64?
        public var pick: RevisionID?
        public var body: JSONValue?
        public var delete: Bool?

        public init(ticket: Int64, resolution: Resolution) {
            self.ticket = ticket
            pick = resolution.pick
            body = resolution.body
            delete = resolution.delete
        }

        /// The answer's resolution.
        public var resolution: Resolution { Resolution(pick: pick, body: body, delete: delete) }

        public func validate() throws(AdminFailure) {
            guard let ticket else { throw AdminFailure(.invalidArgument, "\"resolver.answer\" needs \"ticket\": an integer") }
            try check("ticket", ticket, in: 1...Int64.max)
        }

        /// The revision the answer wrote.
        public struct Reply: Codable, Sendable, Equatable {
            public var db: String
            public var doc: String
            public var rev: RevisionID

            public init(db: String, doc: String, rev: RevisionID) {
                self.db = db
                self.doc = doc
                self.rev = rev
            }
        }
    }
}
