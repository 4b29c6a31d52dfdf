/// The 16-bit codes carried by `error`, rejected `revisionsAck` and `close` messages
/// (`Protocol/replication-v1.md` §8). The ranges say what kind of condition a code reports:
///
/// - `0x0000–0x00FF` not an error: why a connection ended normally.
/// - `0x0100–0x01FF` fatal protocol violations: the connection closes.
/// - `0x0200–0x02FF` request errors: one request failed, the connection stays up.
/// - `0x0300–0x03FF` handshake and authorisation (defined by CanopyCrypto, §4).
///
/// A receiver that does not know a code treats it by its range.
public struct ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// What a code's range says about the condition.
    public enum Kind: Sendable, Equatable {
        case notAnError, fatal, request, handshake, unassigned
    }

    /// The range this code falls in.
    public var kind: Kind {
        switch rawValue {
        case 0x0000...0x00FF: return .notAnError
        case 0x0100...0x01FF: return .fatal
        case 0x0200...0x02FF: return .request
        case 0x0300...0x03FF: return .handshake
        default: return .unassigned
        }
    }

    // Not an error.
    /// The side is done with the connection (replication finished or stopped).
    public static let normal = ErrorCode(rawValue: 0x0000)
    /// The side is shutting down.
    public static let goingAway = ErrorCode(rawValue: 0x0001)
    /// A newer connection to the same peer replaces this one (simultaneous connect).
    public static let replaced = ErrorCode(rawValue: 0x0002)

    // Fatal protocol violations.
    /// A frame or fragment is malformed: bad length prefix, flags, empty plaintext.
    public static let malformedFrame = ErrorCode(rawValue: 0x0100)
    /// A message's bytes do not follow its layout: truncated, overlong varint, trailing bytes,
    /// invalid UTF-8, reserved bits set.
    public static let malformedMessage = ErrorCode(rawValue: 0x0101)
    /// A length or count is above its limit (§9).
    public static let limitExceeded = ErrorCode(rawValue: 0x0102)
    /// A message type this version does not define.
    public static let unknownMessageType = ErrorCode(rawValue: 0x0103)
    /// A message that is not valid in the connection's current state.
    public static let unexpectedMessage = ErrorCode(rawValue: 0x0104)
    /// A revision id with generation 0 or above the maximum, or an unknown revision kind.
    public static let invalidRevision = ErrorCode(rawValue: 0x0105)
    /// A reply, ack or reference names a request, entry or revision that was not asked for.
    public static let invalidReference = ErrorCode(rawValue: 0x0106)
    /// The peer exceeded an in-flight window it was given.
    public static let windowExceeded = ErrorCode(rawValue: 0x0107)
    /// No protocol version both sides speak.
    public static let unsupportedVersion = ErrorCode(rawValue: 0x0108)
    /// Nothing received for `receiveTimeoutSeconds`.
    public static let timeout = ErrorCode(rawValue: 0x0109)
    /// Decryption or the secure channel failed (reported by CanopyCrypto, listed here).
    public static let channelFailure = ErrorCode(rawValue: 0x010A)

    // Request errors.
    /// The request named something that does not exist (e.g. an unknown replication).
    public static let notFound = ErrorCode(rawValue: 0x0200)
    /// The peer may not do this (e.g. a filter the node refuses to serve).
    public static let forbidden = ErrorCode(rawValue: 0x0201)
    /// A local failure (disk full, database error); retrying later may succeed.
    public static let storageFailure = ErrorCode(rawValue: 0x0202)
    /// A revision failed the content check: its body is not a canonical JSON object or its id is
    /// not the hash of its content (§6.6). Sent in `close`: the peer is lying or broken.
    public static let invalidDocument = ErrorCode(rawValue: 0x0203)
    /// The side is overloaded; retry later.
    public static let busy = ErrorCode(rawValue: 0x0204)
    /// The request crosses one of the receiver's own for the same thing, and the receiver's wins
    /// (version 2: crossing `attach`es for one database; the initiator's channel is kept).
    public static let conflict = ErrorCode(rawValue: 0x0205)

    /// The code's name if this version defines it, else its hex value.
    public var description: String {
        ErrorCode.names[rawValue] ?? "0x" + String(rawValue, radix: 16)
    }

    /// Every code this version defines, with its name, in code order (the spec's table).
    public static let allDefined: [(code: ErrorCode, name: String)] = [
        (.normal, "normal"), (.goingAway, "goingAway"), (.replaced, "replaced"),
        (.malformedFrame, "malformedFrame"), (.malformedMessage, "malformedMessage"),
        (.limitExceeded, "limitExceeded"), (.unknownMessageType, "unknownMessageType"),
        (.unexpectedMessage, "unexpectedMessage"), (.invalidRevision, "invalidRevision"),
        (.invalidReference, "invalidReference"), (.windowExceeded, "windowExceeded"),
        (.unsupportedVersion, "unsupportedVersion"), (.timeout, "timeout"),
        (.channelFailure, "channelFailure"),
        (.notFound, "notFound"), (.forbidden, "forbidden"), (.storageFailure, "storageFailure"),
        (.invalidDocument, "invalidDocument"), (.busy, "busy"), (.conflict, "conflict"),
    ]

    private static let names: [UInt16: String] = Dictionary(
        uniqueKeysWithValues: allDefined.map { ($0.code.rawValue, $0.name) })
}
