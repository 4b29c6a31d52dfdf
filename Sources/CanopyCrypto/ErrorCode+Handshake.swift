import CanopyWire

/// The `0x03xx` codes of Protocol/replication-v1.md §8.1, which CanopyWire leaves to this module.
/// They are never sent: before the peer is authenticated a node closes silently (§4.5). They name
/// why a connection failed in local reports (logs, admin events).
extension ErrorCode {
    /// The handshake failed: malformed, wrong network key, bad signature, small-order key, ….
    public static let handshakeFailed = ErrorCode(rawValue: 0x0300)
    /// The peer authenticated but is not allowed; it was recorded as pending.
    public static let notAuthorized = ErrorCode(rawValue: 0x0301)
    /// The peer is this node itself.
    public static let selfConnection = ErrorCode(rawValue: 0x0302)
    /// The handshake did not complete within `handshakeTimeoutSeconds`.
    public static let handshakeTimeout = ErrorCode(rawValue: 0x0303)

    /// The handshake codes with their spec names, in code order.
    public static let handshakeCodes: [(code: ErrorCode, name: String)] = [
        (.handshakeFailed, "handshakeFailed"), (.notAuthorized, "notAuthorized"),
        (.selfConnection, "selfConnection"), (.handshakeTimeout, "handshakeTimeout"),
    ]

    /// The spec name of any code this version defines (CanopyWire's or the handshake's).
    public var name: String {
        ErrorCode.handshakeCodes.first { $0.code == self }?.name ?? description
    }
}
