import CanopyAdmin
import CanopyCore
import Dispatch

/// Who sent a command: a client of the admin socket, or the application the agent runs in
/// (`Agent.perform`), which has no connection to stream on or to watch close.
enum AdminCaller: Sendable {
    /// A client of the socket, with what its upload stored when the command is one (`attach`).
    case client(AdminClient, uploaded: UploadedContent?)
    case application

    /// The socket client of a command that streams to its connection or is bound to it
    /// (`events`, the resolver commands); the application's process has none.
    func socketClient<C: AdminCommand>(for command: C) throws(AdminFailure) -> AdminClient {
        guard case .client(let client, _) = self else {
            throw AdminFailure(.invalidRequest, "\(C.name) is bound to a connection of the admin socket")
        }
        return client
    }

    /// What the upload of `command` stored: its bytes follow the request line on the socket.
    func uploaded<C: AdminCommand>(for command: C) throws(AdminFailure) -> UploadedContent {
        guard case .client(_, let uploaded?) = self else {
            throw AdminFailure(.invalidArgument, "\(C.name) is an upload: its line is followed by its bytes (Protocol/admin-v1.md §2)")
        }
        return uploaded
    }
}

/// The queue a command's handler starts on: the agent's own state is read on `queue`, documents
/// on `storeQueue`; `caller` handlers hop themselves (`check` and `backup` copy or read the
/// database on a global queue; `shutdown` and `reload` are called from any queue).
enum AdminRouteQueue: Sendable {
    case agent
    case store
    case caller
}

/// One command's handler, typed: the agent decodes a request line into `C`, or takes `C` from
/// the application, and calls `run` on `queue`; `run` calls its reply exactly once, from any
/// queue. An `AdminFailure` it throws is the reply (another error is `failed`).
struct TypedAdminRoute<C: AdminCommand>: Sendable {
    typealias Reply = @Sendable (Result<C.Reply, AdminFailure>) -> Void

    let queue: AdminRouteQueue
    let run: @Sendable (Agent, C, AdminCaller, @escaping Reply) throws -> Void

    /// Runs `command` on the route's queue.
    func start(_ agent: Agent, _ command: C, caller: AdminCaller, _ reply: @escaping Reply) {
        let body: @Sendable () -> Void = {
            do {
                try run(agent, command, caller, reply)
            } catch let failure as AdminFailure {
                reply(.failure(failure))
            } catch {
                reply(.failure(AdminFailure(.failed, "\(error)")))
            }
        }
        switch queue {
        case .agent: agent.queue.async(execute: body)
        case .store: agent.storeQueue.async(execute: body)
        case .caller: body()
        }
    }
}

/// A command's entry in the agent's table: its name, how a request line runs it, and the typed
/// route the application's calls use.
struct AdminRoute: Sendable {
    let name: String
    /// Decodes the line's arguments, runs the command and encodes its reply.
    let runLine: @Sendable (Agent, AdminRequest, AdminClient, @escaping AdminReply) -> Void
    /// The `TypedAdminRoute<C>` for `Agent.perform`.
    let typed: any Sendable

    init<C: AdminCommand>(
        _ type: C.Type, on queue: AdminRouteQueue,
        _ run: @escaping @Sendable (Agent, C, AdminCaller, @escaping TypedAdminRoute<C>.Reply) throws -> Void
    ) {
        let route = TypedAdminRoute<C>(queue: queue, run: run)
        name = C.name
        typed = route
        runLine = { agent, request, client, reply in
            let command: C
            do throws(AdminFailure) {
                command = try request.decode(C.self)
            } catch {
                return reply(.failure(error))
            }
            route.start(agent, command, caller: .client(client, uploaded: request.uploaded)) { result in
                reply(result.flatMap { AdminResponseLine.members(of: $0) })
            }
        }
    }
}

extension Agent {
    /// Runs an admin command as the socket would, for an application running the agent in its
    /// process: the same handler with the same typed values, and no JSON. Callable from any
    /// queue; `completion` is called once, on any queue. Commands that stream to their client
    /// (`events`, `resolver.register`, `sync` with `wait`) are the socket's only.
    package func perform<C: AdminCommand>(_ command: C, _ completion: @escaping @Sendable (Result<C.Reply, AdminFailure>) -> Void) {
        guard let route = Self.routes[C.name]?.typed as? TypedAdminRoute<C> else {
            return completion(.failure(AdminFailure(.unknownCommand, "\(C.name) cannot be run in the application's process")))
        }
        do throws(AdminFailure) {
            try command.validate()
        } catch {
            return completion(.failure(error))
        }
        route.start(self, command, caller: .application, completion)
    }

    /// `perform`, awaited.
    package func perform<C: AdminCommand>(_ command: C) async throws(AdminFailure) -> C.Reply {
        let result = await withCheckedContinuation { (done: CheckedContinuation<Result<C.Reply, AdminFailure>, Never>) in
            perform(command) { done.resume(returning: $0) }
        }
        return try result.get()
    }
}
