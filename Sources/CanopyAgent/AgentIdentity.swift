import CanopyCrypto

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The node's identity as the agent uses it: created once by `canopyd init`, loaded at start.
/// The key file format and the node id's text form are CanopyCrypto's (`Identity+File`,
/// `NodeID`); the agent writes node ids in their printed form (eight dash-separated groups),
/// in the config file and on the admin socket alike.
public struct AgentIdentity: Sendable {
    /// The key pair.
    public let identity: Identity

    /// The node id in its printed form.
    public var nodeID: String { identity.nodeID.description }

    /// Generates a new identity and writes it to `path` (0600, synced). Refuses if a file exists.
    public static func create(at path: String) throws(AgentError) -> AgentIdentity {
        guard access(path, F_OK) != 0 else { throw .identityExists(path: path) }
        var entropy = SystemEntropy()
        let identity = Identity.generate(random: &entropy)
        do {
            try identity.save(path: path)
        } catch {
            if case .identityFileIO(_, _, EEXIST) = error { throw .identityExists(path: path) }
            throw .badIdentity(path: path, detail: "\(error)")
        }
        return AgentIdentity(identity: identity)
    }

    /// Loads the identity at `path`; CanopyCrypto refuses a file others may read.
    public static func load(path: String) throws(AgentError) -> AgentIdentity {
        do {
            return AgentIdentity(identity: try Identity.load(path: path))
        } catch {
            throw .badIdentity(path: path, detail: "\(error)")
        }
    }

    /// The printed form of a node id typed by a person (case, dashes and spaces ignored; the
    /// check characters must be right), or nil if it is not one.
    public static func normalizeNodeID(_ text: String) -> String? {
        (try? NodeID(parsing: text))?.description
    }

    /// The node id for a canonical text form.
    static func nodeID(_ text: String) -> NodeID? {
        try? NodeID(parsing: text)
    }
}
