import CanopyCore
import CanopyReplication

/// A line the agent sends a client, read by kind (Protocol/admin-v1.md §3, §5): a client skips
/// the kinds it does not use (§3), and a line of a kind this version does not know is `other`.
public enum AdminLine: Sendable {
    /// The response to the request `id`: a success or an error; `AdminAnswer.read` reads it.
    case response(id: Int64, members: [String: JSONValue])
    /// An error that names no request (`id` null): `busy`, `parse_error`, `line_too_long`.
    case refusal(AdminFailure)
    /// An event of a subscribed connection.
    case event(Admin.Event)
    /// A conflict offered to the resolver registered on the connection.
    case offer(ResolverOffer)
    /// The go-ahead for an upload's bytes.
    case upload(AdminUploadGrant)
    /// A line of a kind this client does not know.
    case other([String: JSONValue])

    /// Reads a line (without its newline). A line that is not a JSON object, or whose event or
    /// offer does not have the protocol's shape, is `failed` naming the problem.
    public static func read(_ line: some Collection<UInt8>) throws(AdminFailure) -> AdminLine {
        guard let value = try? JSONValue.parse(Array(line)), case .object(let members) = value else {
            throw AdminFailure(.failed, "the agent sent a line that is not a JSON object: \(String(decoding: Array(line.prefix(120)), as: UTF8.self))")
        }
        return try read(members)
    }

    /// Reads a line's object.
    public static func read(_ members: [String: JSONValue]) throws(AdminFailure) -> AdminLine {
        if let offer = members["resolve"] {
            do {
                return .offer(try JSONValueDecoder().decode(ResolverOffer.self, from: offer))
            } catch {
                throw AdminFailure(.failed, "the agent sent an offer without the shape of admin-v1.md §5: \(error)")
            }
        }
        if members["event"] != nil {
            do {
                return .event(try JSONValueDecoder().decode(Admin.EventLine.self, from: .object(members)).event)
            } catch {
                throw AdminFailure(.failed, "the agent sent an event without the shape of admin-v1.md §5: \(error)")
            }
        }
        if let grant = AdminUploadGrant(line: members) { return .upload(grant) }
        if let id = AdminResponseLine.responseID(of: members) { return .response(id: id, members: members) }
        if members["id"] == .null, let failure = AdminResponseLine.failure(in: members) { return .refusal(failure) }
        return .other(members)
    }
}
