#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The identity file: one line of ASCII,
///
///     canopy-identity-v2 <64 lowercase hex characters of the 32-byte seed> <node id, text form>\n
///
/// A text file so an operator can see what it is and back it up; the seed because the whole key
/// pair is derived from it, and the node id the seed gives, so a damaged file (a changed digit
/// would otherwise start the agent as another node, silently) is refused: the seed must give that
/// node id, and the node id's own check characters catch damage to it. Files of the first format
/// (`canopy-identity-v1 <seed>`, no node id) are still read. The agent keeps it mode 0600
/// (`Protocol/design.md` §6.2) and `load` refuses a file that group or others may read or write,
/// as ssh does for private keys.
extension Identity {
    /// The first word of an identity file written now; a later format gets a new word.
    static let fileMagic = "canopy-identity-v2"
    /// The first word of the format without the node id.
    static let fileMagicV1 = "canopy-identity-v1"
    /// Exact size of a first-format file: magic, space, 64 hex characters, newline.
    static let fileBytesV1 = fileMagicV1.utf8.count + 1 + 2 * seedBytes + 1
    /// The most bytes an identity file may have (the node id's text form is well under it).
    static let fileBytes = 256

    /// The identity file's contents.
    public func fileContents() -> [UInt8] {
        var seed = self.seed
        defer { Sodium.wipe(&seed) }
        let hex = seed.flatMap { byte in
            [Identity.hexDigits[Int(byte >> 4)], Identity.hexDigits[Int(byte & 15)]]
        }
        return Array(Identity.fileMagic.utf8) + [UInt8(ascii: " ")] + hex + [UInt8(ascii: " ")]
            + Array(nodeID.description.utf8) + [UInt8(ascii: "\n")]
    }

    /// Parses an identity file's contents; anything but the exact format is refused, and so is a
    /// file whose seed does not give the node id it records.
    public init(fileContents bytes: [UInt8]) throws(CryptoError) {
        let current = Array(Identity.fileMagic.utf8)
        let first = Array(Identity.fileMagicV1.utf8)
        let magicBytes = current.count
        guard bytes.count > magicBytes + 1 + 2 * Identity.seedBytes, bytes.last == UInt8(ascii: "\n"),
            bytes[magicBytes] == UInt8(ascii: " ")
        else { throw .identityFileMalformed("expected \(Identity.fileMagic), the seed and the node id on one line") }
        let magic = Array(bytes[0..<magicBytes])
        guard magic == current || magic == first else {
            throw .identityFileMalformed("does not start with \(Identity.fileMagic)")
        }
        var seed: [UInt8] = []
        defer { Sodium.wipe(&seed) }
        var index = magicBytes + 1
        while seed.count < Identity.seedBytes {
            guard let high = Identity.hexDigits.firstIndex(of: bytes[index]),
                let low = Identity.hexDigits.firstIndex(of: bytes[index + 1])
            else { throw .identityFileMalformed("seed is not 64 lowercase hex characters") }
            seed.append(UInt8(high << 4 | low))
            index += 2
        }
        let identity = Identity(seed: seed)!
        if magic == first {
            guard bytes.count == Identity.fileBytesV1 else {
                throw .identityFileMalformed("expected \(Identity.fileBytesV1) bytes, found \(bytes.count)")
            }
            self = identity
            return
        }
        guard bytes[index] == UInt8(ascii: " ") else { throw .identityFileMalformed("no node id after the seed") }
        let text = String(decoding: bytes[(index + 1)..<(bytes.count - 1)], as: UTF8.self)
        let recorded: NodeID
        do { recorded = try NodeID(parsing: text) } catch {
            throw .identityFileMalformed("the node id it records is damaged (\(error)); restore the file from a backup")
        }
        guard recorded == identity.nodeID else {
            throw .identityFileMalformed(
                "it records node \(recorded) but its key is node \(identity.nodeID): the file is damaged; restore it from a backup")
        }
        self = identity
    }

    /// Reads the identity at `path`, refusing a file with permissions wider than 0600.
    public static func load(path: String) throws(CryptoError) -> Identity {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .identityFileIO(operation: "open", path: path, errno: errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw .identityFileIO(operation: "fstat", path: path, errno: errno)
        }
        let mode = UInt32(info.st_mode) & 0o777
        guard mode & 0o077 == 0 else { throw .identityFilePermissions(path: path, mode: mode) }
        // One byte more than a valid file so an over-long file is noticed, not truncated.
        var buffer = [UInt8](repeating: 0, count: fileBytes + 1)
        defer { Sodium.wipe(&buffer) }
        var filled = 0
        while filled < buffer.count {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw .identityFileIO(operation: "read", path: path, errno: errno) }
            if count == 0 { break }
            filled += count
        }
        return try Identity(fileContents: Array(buffer[0..<filled]))
    }

    /// Writes a new identity file at `path` with mode 0600 and syncs it. Refuses to replace an
    /// existing file: losing an identity changes the node id every peer knows.
    public func save(path: String) throws(CryptoError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .identityFileIO(operation: "open", path: path, errno: errno) }
        defer { close(fd) }
        var contents = fileContents()
        defer { Sodium.wipe(&contents) }
        var written = 0
        while written < contents.count {
            let count = contents.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw .identityFileIO(operation: "write", path: path, errno: errno) }
            written += count
        }
        guard fsync(fd) == 0 else { throw .identityFileIO(operation: "fsync", path: path, errno: errno) }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}
