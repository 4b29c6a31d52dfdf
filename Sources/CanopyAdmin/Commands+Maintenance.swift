import CanopyCore

// MARK: Backup and check

extension Admin {
    /// `backup {path, with_identity?}`: a copy of the running node in the new directory `path`
    /// (absolute) that restores as a data directory; with `with_identity`, the node's key too.
    public struct Backup: AdminCommand {
        public static let name = "backup"
        public var path: String
        public var withIdentity: Bool?

        public init(path: String, withIdentity: Bool = false) {
            self.path = path
            self.withIdentity = withIdentity
        }

        public func validate() throws(AdminFailure) {
            guard path.hasPrefix("/") else {
                throw AdminFailure(.invalidArgument, "\"path\" must be absolute: the agent's working directory is not the client's")
            }
        }

        public struct Reply: Codable, Sendable, Equatable {
            public var path: String
            /// The database files' size.
            public var bytes: Int64
            public var documents: Int64
            public var databases: Int64
            public var withIdentity: Bool
            /// Attachment content files copied, and their bytes.
            public var attachments: Int64
            public var attachmentBytes: Int64

            public init(
                path: String, bytes: Int64, documents: Int64, databases: Int64, withIdentity: Bool, attachments: Int64,
                attachmentBytes: Int64
            ) {
                self.path = path
                self.bytes = bytes
                self.documents = documents
                self.databases = databases
                self.withIdentity = withIdentity
                self.attachments = attachments
                self.attachmentBytes = attachmentBytes
            }
        }
    }

    /// `check {attachments?}`: SQLite's full integrity check of every database, every document
    /// row against its revisions, and (unless `attachments` is false) every attachment content
    /// read whole against its digest.
    public struct Check: AdminCommand {
        public static let name = "check"
        /// Default true.
        public var attachments: Bool?

        public init(attachments: Bool = true) { self.attachments = attachments }

        public struct Reply: Codable, Sendable, Equatable {
            /// No problem found.
            public var sound: Bool
            public var problems: [String]
            /// Files an interrupted upload left: they take space, but no revision names them.
            public var leftovers: [String]
            /// Document rows checked.
            public var documents: Int64
            /// The documents that could not be read, each with its database.
            public var damaged: [DamageRow]
            public var seconds: Double
            /// Attachment content files verified, and their bytes.
            public var attachments: Int64
            public var attachmentBytes: Int64

            public init(
                sound: Bool, problems: [String], leftovers: [String], documents: Int64, damaged: [DamageRow], seconds: Double,
                attachments: Int64, attachmentBytes: Int64
            ) {
                self.sound = sound
                self.problems = problems
                self.leftovers = leftovers
                self.documents = documents
                self.damaged = damaged
                self.seconds = seconds
                self.attachments = attachments
                self.attachmentBytes = attachmentBytes
            }
        }
    }
}
