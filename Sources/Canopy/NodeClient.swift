import CanopyAdmin
import CanopyAgent
import CanopyCore
import Dispatch
import Synchronization

/// A client of a running agent (`canopyd`, or a ``Node`` in another process) over its admin
/// socket (Protocol/admin-v1.md): an application reads and writes the agent's documents, lists
/// its peers, syncs with one and follows its event stream, with `async` methods.
///
/// Requests share one connection and are sent one at a time, in call order, from a queue of the
/// client's own (the socket calls block; they never run on Swift's cooperative threads). A
/// connection the agent closed is replaced by the next request; the request that saw it close
/// fails with ``NodeClientError/connectionLost(path:detail:)`` and is not sent again. ``sync(peer:)``
/// and ``events(since:)`` each open a connection of their own, so they do not hold up other
/// requests. The agent must run as the same user (the socket admits only its own uid).
public final class NodeClient: Sendable {
    /// The admin socket this client connects to.
    public let socketPath: String

    /// Sends the shared connection's requests in order, off the cooperative pool.
    private let queue = DispatchQueue(label: "canopy.node-client")
    /// The shared connection; nil after it broke, until the next request connects again.
    private let connection: Mutex<AdminSocketClient?>

    /// Connects to the agent's admin socket at `socket`. Throws
    /// ``NodeClientError/cannotConnect(path:detail:)`` when no agent answers there.
    public init(socket: String) throws(NodeClientError) {
        socketPath = socket
        connection = Mutex(try Self.connect(socket))
    }

    /// Connects to the agent whose data directory is `directory`, at its default admin socket
    /// `directory/admin.sock`.
    public convenience init(directory: String) throws(NodeClientError) {
        try self.init(socket: directory + "/admin.sock")
    }

    /// A new connection to `path`.
    static func connect(_ path: String) throws(NodeClientError) -> AdminSocketClient {
        do throws(AdminSocketClient.ClientError) {
            return try AdminSocketClient(path: path)
        } catch {
            throw NodeClientError(error, path: path)
        }
    }

    /// Runs `command` on the shared connection and returns its reply; an error response throws
    /// ``NodeClientError/agent(code:message:)``, a reply that does not fit this client
    /// ``NodeClientError/unexpectedResponse(_:)``.
    func call<C: AdminCommand>(_ command: C) async throws(NodeClientError) -> C.Reply {
        try await Self.offPool(queue) { self.sendShared(command) }.get()
    }

    /// Runs `work` on `queue` and returns its result to the awaiting task.
    static func offPool<T: Sendable>(_ queue: DispatchQueue, _ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { done in
            queue.async { done.resume(returning: work()) }
        }
    }

    /// On `queue`: the request on the shared connection, connecting first if it broke before.
    private func sendShared<C: AdminCommand>(_ command: C) -> Result<C.Reply, NodeClientError> {
        let client: AdminSocketClient
        if let open = connection.withLock({ $0 }) {
            client = open
        } else {
            do throws(NodeClientError) {
                client = try Self.connect(socketPath)
            } catch {
                return .failure(error)
            }
            connection.withLock { $0 = client }
        }
        let result = Self.send(client, command, path: socketPath)
        if case .failure(let error) = result, error.closesConnection {
            connection.withLock { $0 = nil }
        }
        return result
    }

    /// Sends `command` on `client` (blocking) and reads its reply.
    static func send<C: AdminCommand>(_ client: AdminSocketClient, _ command: C, path: String) -> Result<C.Reply, NodeClientError> {
        let response: [String: JSONValue]
        do throws(AdminSocketClient.ClientError) {
            response = try client.request(C.name, AdminRequestLine.encodeArguments(command))
        } catch {
            return .failure(NodeClientError(error, path: path))
        }
        if !AdminResponseLine.isSuccess(response) {
            guard let failure = AdminResponseLine.failure(in: response) else {
                return .failure(.unexpectedResponse("\(C.name): a response that is neither ok nor an error"))
            }
            return .failure(.agent(code: failure.code.rawValue, message: failure.message))
        }
        return AdminResponseLine.reply(to: C.self, from: response).mapError { .unexpectedResponse($0.message) }
    }
}
