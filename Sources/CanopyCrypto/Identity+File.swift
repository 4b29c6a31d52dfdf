#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The identity file: one line of ASCII,
///
///     canopy-identity-v1 <64 lowercase hex characters of the 32-byte seed>\n
///
/// A text file so an operator can see what it is and back it up; the seed alone because the whole
/// key pair is derived from it. The agent keeps it mode 0600 (`Protocol/design.md` §6.2) and `load` refuses a
/// file that group or others may read or write, as ssh does for private keys.
extension Identity {
    /// The first word of an identity file; a later format gets a new word.
    static let fileMagic = "canopy-identity-v1"
    /// Exact size of an identity file: magic, space, 64 hex characters, newline.
    static let fileBytes = fileMagic.utf8.count + 1 + 2 * seedBytes + 1

    /// The identity file's contents.
    public func fileContents() -> [UInt8] {
        var seed = self.seed
        defer { Sodium.wipe(&seed) }
        let hex = seed.flatMap { byte in
            [Identity.hexDigits[Int(byte >> 4)], Identity.hexDigits[Int(byte & 15)]]
        }
        return Array(Identity.fileMagic.utf8) + [UInt8(ascii: " ")] + hex + [UInt8(ascii: "\n")]
    }

    /// Parses an identity file's contents; anything but the exact format is refused.
    public init(fileContents bytes: [UInt8]) throws(CryptoError) {
        let magic = Array(Identity.fileMagic.utf8)
        guard bytes.count == Identity.fileBytes else {
            throw .identityFileMalformed("expected \(Identity.fileBytes) bytes, found \(bytes.count)")
        }
        guard Array(bytes[0..<magic.count]) == magic, bytes[magic.count] == UInt8(ascii: " "),
            bytes.last == UInt8(ascii: "\n")
        else { throw .identityFileMalformed("does not start with \(Identity.fileMagic)") }
        var seed: [UInt8] = []
        defer { Sodium.wipe(&seed) }
        var index = magic.count + 1
        while seed.count < Identity.seedBytes {
            guard let high = Identity.hexDigits.firstIndex(of: bytes[index]),
                let low = Identity.hexDigits.firstIndex(of: bytes[index + 1])
            else { throw .identityFileMalformed("seed is not 64 lowercase hex characters") }
            seed.append(UInt8(high << 4 | low))
            index += 2
        }
        self = Identity(seed: seed)!
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
