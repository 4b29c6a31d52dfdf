import CanopyAdmin
import CanopyCore
import CanopyStore
import Dispatch
import Logging

/// The reply callback every command gets; called exactly once.
typealias AdminReply = @Sendable (Result<[String: JSONValue], AdminFailure>) -> Void

/// Admin commands: the table from `cmd` to handler (Protocol/admin-v1.md §6). Handlers for the
/// agent's own state run on `queue`; document handlers run on `storeQueue`; `check` and `backup`
/// copy or read the database on a global queue. The handlers live with their concern: status
/// (`Agent+Status`), config (`Agent+Config`), replication (`Agent+Replication`), events
/// (`EventHub`), documents, transfer, backup and the resolver (`ResolverHub`).
extension Agent: AdminRequestHandler {
    /// Every command name, sorted, for `unknown_command` messages and the spec test: the routes'
    /// and the download (`attachment`, whose reply the connection streams).
    public static var commandNames: [String] { (Array(routes.keys) + AdminClient.downloadCommands).sorted() }

    /// Commands that change state; each is logged (the socket admits only the agent's own uid, so
    /// the log records what was done, not who). Those that change how the node is set up or
    /// runs (`operatorCommands`) are logged at info, the default level: an operator acts on them
    /// and they are few. The others change documents, a line per request, and are logged at
    /// debug: at info, twenty writes a second wrote 134 MB of log a day.
    static let mutatingCommands: Set<String> = operatorCommands.union([
        "attach", "bulk_docs", "delete", "detach", "import", "put", "resolve", "sync",
    ])

    /// The state-changing commands logged at info (see `mutatingCommands`).
    static let operatorCommands: Set<String> = [
        "backup", "compact", "db.create", "db.delete", "db.dismiss", "peer.accept", "peer.add", "peer.remove", "reload",
        "resolver.register", "share", "shutdown", "unshare",
    ]

    func handle(_ request: AdminRequest, client: AdminClient, reply: @escaping AdminReply) {
        if Self.mutatingCommands.contains(request.command) {
            let level: Logger.Level = Self.operatorCommands.contains(request.command) ? .info : .debug
            logger.log(level: level, "admin \(request.command) \(request.line.loggedTarget)")
        }
        guard let route = Self.routes[request.command] else {
            return reply(.failure(AdminFailure(
                .unknownCommand, "unknown command \"\(request.command.prefix(80))\"; commands: \(Self.commandNames.joined(separator: ", "))")))
        }
        route.runLine(self, request, client, reply)
    }

    /// The commands that run through typed routes (`AdminRoutes`), by name.
    static let routes: [String: AdminRoute] = Dictionary(uniqueKeysWithValues: [
        AdminRoute(Admin.Status.self, on: .agent) { agent, _, _, reply in agent.status(reply) },
        AdminRoute(Admin.Stats.self, on: .store) { agent, _, _, reply in reply(agent.storeResult { try agent.stats() }) },
        AdminRoute(Admin.Peers.self, on: .agent) { agent, _, _, reply in agent.peerList(reply) },
        AdminRoute(Admin.AddPeer.self, on: .agent) { agent, command, _, reply in
            reply(.success(try agent.addPeer(command.peer, accepting: false)))
        },
        AdminRoute(Admin.AcceptPeer.self, on: .agent) { agent, command, _, reply in
            reply(.success(try agent.addPeer(command.peer, accepting: true)))
        },
        AdminRoute(Admin.RemovePeer.self, on: .agent) { agent, command, _, reply in reply(.success(try agent.removePeer(command))) },
        AdminRoute(Admin.CreateDatabase.self, on: .agent) { agent, command, _, reply in try agent.createDatabase(command, reply) },
        AdminRoute(Admin.DeleteDatabase.self, on: .agent) { agent, command, _, reply in try agent.deleteDatabase(command, reply) },
        AdminRoute(Admin.ListDatabases.self, on: .agent) { agent, _, _, reply in agent.listDatabases(reply) },
        AdminRoute(Admin.ListPendingShares.self, on: .agent) { agent, _, _, reply in reply(.success(agent.listPendingShares())) },
        AdminRoute(Admin.DismissPendingShare.self, on: .agent) { agent, command, _, reply in
            reply(.success(try agent.dismissPendingShare(command)))
        },
        AdminRoute(Admin.ShareDatabase.self, on: .agent) { agent, command, _, reply in reply(.success(try agent.share(command))) },
        AdminRoute(Admin.UnshareDatabase.self, on: .agent) { agent, command, _, reply in reply(.success(try agent.unshare(command))) },
        AdminRoute(Admin.PutDocument.self, on: .store) { agent, command, _, reply in reply(agent.storeResult { try agent.put(command) }) },
        AdminRoute(Admin.GetDocument.self, on: .store) { agent, command, _, reply in reply(agent.storeResult { try agent.get(command) }) },
        AdminRoute(Admin.DeleteDocument.self, on: .store) { agent, command, _, reply in
            reply(agent.storeResult { try agent.delete(command) })
        },
        AdminRoute(Admin.Why.self, on: .agent) { agent, command, _, reply in try agent.why(command, reply) },
        AdminRoute(Admin.Compare.self, on: .agent) { agent, command, _, reply in try agent.compare(command, reply) },
        AdminRoute(Admin.ListConflicts.self, on: .agent) { agent, command, _, reply in
            // Which conflicts wait for a resolver is known on `queue`; the list is read on `storeQueue`.
            let waiting = agent.resolvers.waitingResolvers
            agent.storeQueue.async { reply(agent.storeResult { try agent.conflicts(command, waiting: waiting) }) }
        },
        AdminRoute(Admin.Resolve.self, on: .store) { agent, command, _, reply in reply(agent.storeResult { try agent.resolve(command) }) },
        AdminRoute(Admin.Changes.self, on: .store) { agent, command, _, reply in reply(agent.storeResult { try agent.changes(command) }) },
        AdminRoute(Admin.ImportDocuments.self, on: .store) { agent, command, _, reply in
            reply(agent.storeResult { try agent.importDocuments(command) })
        },
        AdminRoute(Admin.BulkDocuments.self, on: .store) { agent, command, _, reply in
            reply(agent.storeResult { try agent.bulkDocuments(command) })
        },
        AdminRoute(Admin.ExportDocuments.self, on: .store) { agent, command, _, reply in
            reply(agent.storeResult { try agent.exportDocuments(command) })
        },
        AdminRoute(Admin.Backup.self, on: .agent) { agent, command, _, reply in try agent.backup(command, reply) },
        AdminRoute(Admin.Check.self, on: .caller) { agent, command, _, reply in agent.check(command, reply) },
        AdminRoute(Admin.Sync.self, on: .agent) { agent, command, caller, reply in try agent.sync(command, caller: caller, reply) },
        AdminRoute(Admin.Subscribe.self, on: .agent) { agent, command, caller, reply in
            agent.events.subscribe(command, client: try caller.socketClient(for: command), reply)
        },
        AdminRoute(Admin.RegisterResolver.self, on: .agent) { agent, command, caller, reply in
            try agent.resolvers.register(command, client: caller.socketClient(for: command), reply: reply)
        },
        AdminRoute(Admin.AnswerResolver.self, on: .agent) { agent, command, caller, reply in
            try agent.resolvers.answer(command, client: caller.socketClient(for: command), reply: reply)
        },
        AdminRoute(Admin.Attach.self, on: .store) { agent, command, caller, reply in
            // An upload: its bytes are stored already.
            let uploaded = try caller.uploaded(for: command)
            reply(agent.storeResult { try agent.attach(command, uploaded: uploaded) })
        },
        AdminRoute(Admin.Detach.self, on: .store) { agent, command, _, reply in reply(agent.storeResult { try agent.detach(command) }) },
        AdminRoute(Admin.Compact.self, on: .store) { agent, command, _, reply in
            reply(agent.storeResult { try agent.compact(command) })
        },
        AdminRoute(Admin.Reload.self, on: .caller) { agent, _, _, reply in
            agent.reload { result in
                reply(result.map { Admin.Reload.Reply(restartRequired: $0) }.mapError { AdminFailure(.failed, $0.description) })
            }
        },
        AdminRoute(Admin.Shutdown.self, on: .caller) { agent, _, _, reply in
            // The connection stays open until the shutdown has finished (replication stopped and
            // checkpointed); the client then waits for the lock to be free (`AgentExitWait`).
            reply(.success(Admin.Shutdown.Reply(lockPath: agent.options.directory.lockPath)))
            agent.shutdown {}
        },
    ].map { ($0.name, $0) })
}
