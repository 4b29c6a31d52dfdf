import CSodium

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The node's identity as the agent uses it: created once by `canopyd init`, loaded at start.
///
/// INTERIM: until CanopyCrypto's `Identity`/`NodeID` land on main, this keeps the same file format
/// they specify (`canopy-identity-v1 <64 hex seed>\n`, mode 0600) and shows the node id as the
/// Ed25519 public key in upper-case base32 (52 characters). When CanopyCrypto lands, the bodies of
/// these functions delegate to it and only the node id's text form gains check characters.
public struct AgentIdentity: Sendable {
    /// The node id in canonical text form.
    public let nodeID: String
    /// The 32-byte Ed25519 seed (secret).
    let seed: [UInt8]

    private static let magic = "canopy-identity-v1"
    private static let seedBytes = 32
    private static let publicKeyBytes = 32
    private static let nodeIDCharacters = 52
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")

    private init(seed: [UInt8]) {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        var publicKey = [UInt8](repeating: 0, count: Self.publicKeyBytes)
        var secretKey = [UInt8](repeating: 0, count: Int(crypto_sign_SECRETKEYBYTES))
        _ = crypto_sign_seed_keypair(&publicKey, &secretKey, seed)
        sodium_memzero(&secretKey, secretKey.count)
        self.seed = seed
        self.nodeID = Self.base32(publicKey)
    }

    /// Generates a new identity and writes it to `path` (0600, synced). Refuses if a file exists.
    public static func create(at path: String) throws(AgentError) -> AgentIdentity {
        guard access(path, F_OK) != 0 else { throw .identityExists(path: path) }
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        var seed = [UInt8](repeating: 0, count: seedBytes)
        randombytes_buf(&seed, seedBytes)
        let hex = seed.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
        let contents = Array("\(magic) \(hex)\n".utf8)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { throw .identityExists(path: path) }
            throw .system(SystemError("create identity", path))
        }
        defer { close(fd) }
        let written = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == contents.count, fsync(fd) == 0 else { throw .system(SystemError("write identity", path)) }
        return AgentIdentity(seed: seed)
    }

    /// Loads the identity at `path`, refusing one that group or others can access.
    public static func load(path: String) throws(AgentError) -> AgentIdentity {
        var info = stat()
        guard stat(path, &info) == 0 else { throw .system(SystemError("stat identity", path)) }
        guard info.st_mode & 0o077 == 0 else {
            throw .badIdentity(path: path, detail: "mode \(String(info.st_mode & 0o777, radix: 8)) lets others read it; chmod 600")
        }
        let bytes = try DataDirectory.readFile(path, limit: 256)
        let text = String(decoding: bytes, as: UTF8.self)
        let parts = text.split(separator: " ")
        guard parts.count == 2, parts[0] == magic, parts[1].hasSuffix("\n") else {
            throw .badIdentity(path: path, detail: "not a \(magic) file")
        }
        let hex = Array(parts[1].dropLast())
        guard hex.count == 2 * seedBytes else { throw .badIdentity(path: path, detail: "seed is not 64 hex characters") }
        var seed: [UInt8] = []
        for index in stride(from: 0, to: hex.count, by: 2) {
            guard let byte = UInt8(String(hex[index...index + 1]), radix: 16) else {
                throw .badIdentity(path: path, detail: "seed is not 64 hex characters")
            }
            seed.append(byte)
        }
        return AgentIdentity(seed: seed)
    }

    /// The canonical form of a node id typed by a person (case, dashes and spaces ignored), or
    /// nil if it is not one.
    public static func normalizeNodeID(_ text: String) -> String? {
        let compact = text.uppercased().filter { $0 != "-" && $0 != " " }
        guard compact.count == nodeIDCharacters, compact.allSatisfy(alphabet.contains) else { return nil }
        return compact
    }

    private static func base32(_ bytes: [UInt8]) -> String {
        var out = ""
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return out
    }
}

extension String {
    /// The string with leading zeros up to `width` characters.
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
