import CanopyStore

/// `canopyd init`: makes a data directory ready to run.
public enum AgentSetup {
    /// Creates the directory (0700), a new identity (refusing to replace one), the config file
    /// (kept if already there) and the database. Returns the node id.
    public static func initialize(directory: DataDirectory, config: AgentConfig) throws(AgentError) -> String {
        try directory.requireNoUnfinishedBackup()
        try directory.create()
        let lock = try DirectoryLock(path: directory.lockPath)  // no agent may run during init
        return try initialize(directory: directory, config: config, holding: lock)
    }

    /// `initialize` for a process that runs the agent next: returns the directory's lock still
    /// held, for `AgentOptions.heldLock`. Releasing it and taking it again would leave a window
    /// in which a child process forked meanwhile (by a test starting a tool, or an application
    /// starting a program of its own) still holds the lock's file description, and the agent would refuse
    /// to start as if another were running.
    package static func initializeKeepingLock(directory: DataDirectory, config: AgentConfig) throws(AgentError) -> DirectoryLock {
        try directory.requireNoUnfinishedBackup()
        try directory.create()
        let lock = try DirectoryLock(path: directory.lockPath)
        _ = try initialize(directory: directory, config: config, holding: lock)
        return lock
    }

    private static func initialize(
        directory: DataDirectory, config: AgentConfig, holding lock: DirectoryLock
    ) throws(AgentError) -> String {
        let identity = try AgentIdentity.create(at: directory.identityPath)
        if access(directory.configPath, F_OK) != 0 {
            try DataDirectory.writeFileAtomically(directory.configPath, Array(ConfigEditor.render(config).utf8), mode: 0o600)
        }
        try directory.restrictDatabaseFiles()
        do {
            let storeConfiguration = DocumentStore.Configuration(
                revsLimit: config.revsLimit, conflictPolicy: .rules(config.resolutionRules),
                attachmentsDirectory: directory.attachmentsPath)
            _ = try DocumentStore(path: directory.databasePath, configuration: storeConfiguration)
        } catch {
            throw .store(error.description)
        }
        withExtendedLifetime(lock) {}
        return identity.nodeID
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
