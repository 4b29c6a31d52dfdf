import CanopyWire
/// Everything CanopyCrypto can refuse, in the three kinds `Protocol/design.md` §9.3 names:
///
/// - **Bad input from a user** (node id text, identity file): returned so the caller can say what
///   is wrong; nothing is changed.
/// - **A peer's protocol violation** (every `handshake…` and `channel…` case, and
///   `peerNotAuthorized`): the connection MUST be closed. The state machine or channel that
///   reported it is left failed and refuses all further input, so no later byte can be
///   misinterpreted. Before the handshake authenticates the peer, nothing distinguishing is sent
///   back (Protocol/replication-v1.md §8).
/// - **Operating errors** (`identityFileIO`): returned, the caller may retry.
///
/// Programmer errors (wrong key sizes passed by our own code) are preconditions, not cases here.
public enum CryptoError: Error, Equatable, Sendable {
    // MARK: Node ids and identities
    /// Node id text that is not 56 base32 characters (after removing dashes and spaces).
    case nodeIDWrongLength(Int)
    /// Node id text holding a character outside the RFC 4648 base32 alphabet.
    case nodeIDInvalidCharacter(Character)
    /// The check character of a 13-character group (0-based `group`) does not match: a typo.
    case nodeIDWrongCheckCharacter(group: Int)
    /// The last data character carries bits that no 32-byte key produces.
    case nodeIDNotCanonical
    /// An identity file that is not in the documented format.
    case identityFileMalformed(String)
    /// The identity file could not be read or written (`errno` from the system call).
    case identityFileIO(operation: String, path: String, errno: Int32)
    /// The identity file is readable or writable by group or others; refused like ssh does.
    case identityFilePermissions(path: String, mode: UInt32)

    // MARK: Handshake (peer violations; close the connection)
    /// Wrong magic, or bytes that cannot be a handshake message.
    case handshakeMalformed
    /// The initiator speaks a protocol version this node does not.
    case handshakeVersionUnsupported(UInt16)
    /// The network tag does not match: the peer is not in our replication group (or is noise).
    case handshakeNetworkMismatch
    /// An ephemeral key that makes X25519 return all zeros (small-order point).
    case handshakeSmallOrderKey
    /// An encrypted handshake payload failed authentication.
    case handshakeDecryptionFailed
    /// The peer's identity signature over the transcript does not verify.
    case handshakeBadSignature
    /// The peer proved it holds *our* identity key: we dialled ourselves (or a reflection).
    case handshakeSelfConnection
    /// The connection ended before the handshake completed.
    case handshakeTruncated
    /// The handshake did not complete within `WireLimits.handshakeTimeoutSeconds`.
    case handshakeTimedOut
    /// The peer sent bytes when it was our turn to speak.
    case handshakeUnexpectedBytes
    /// The peer authenticated but its node id is not allowed. It has been recorded as pending.
    /// Only this side learns the node id; the peer just sees the connection close.
    case peerNotAuthorized(NodeID)

    // MARK: Secure channel (peer violations; close the connection)
    /// A frame length prefix outside `WireLimits`' bounds (from CanopyWire's `FrameDecoder`);
    /// rejected from the four prefix bytes alone, before anything is buffered for the frame.
    case channelFraming(ProtocolError)
    /// A frame failed authentication (tampered, replayed, reordered or reflected).
    case channelDecryptionFailed
    /// A frame authenticated but carries a tag other than MESSAGE or FINAL.
    case channelUnexpectedTag(UInt8)
    /// The byte stream ended without a FINAL frame: the peer's data may be truncated.
    case channelEndedWithoutFinal
    /// Bytes arrived after the FINAL frame.
    case channelDataAfterFinal
    /// The channel already failed (or finished) and refuses further use.
    case channelUnusable

    // MARK: Local misuse that is not a crash
    /// A plaintext larger than `WireLimits.framePlaintextBytesMax`; split it first.
    case plaintextTooLarge(Int)
}

extension CryptoError {
    /// The protocol's code for a connection failure (Protocol/replication-v1.md §8.2), for logs
    /// and admin events; nil for errors that are not about a connection (node ids, files,
    /// oversized plaintexts). Handshake codes are never sent to the peer.
    public var code: ErrorCode? {
        switch self {
        case .handshakeMalformed, .handshakeVersionUnsupported, .handshakeNetworkMismatch, .handshakeSmallOrderKey,
            .handshakeDecryptionFailed, .handshakeBadSignature, .handshakeUnexpectedBytes, .handshakeTruncated:
            .handshakeFailed
        case .handshakeSelfConnection: .selfConnection
        case .handshakeTimedOut: .handshakeTimeout
        case .peerNotAuthorized: .notAuthorized
        case .channelFraming(let error): error.code
        case .channelDecryptionFailed, .channelUnexpectedTag, .channelDataAfterFinal, .channelEndedWithoutFinal,
            .channelUnusable:
            .channelFailure
        case .nodeIDWrongLength, .nodeIDInvalidCharacter, .nodeIDWrongCheckCharacter, .nodeIDNotCanonical,
            .identityFileMalformed, .identityFileIO, .identityFilePermissions, .plaintextTooLarge:
            nil
        }
    }
}
