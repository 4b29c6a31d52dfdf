import CanopyAdmin
import CanopyCore
import CanopyStore
import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `backup`: a copy of the running node that restores as a data directory.
///
/// `path` names a new directory (absolute; it must not exist, or be empty). It gets, mode 0700:
/// `canopy.sqlite` and `databases/NAME.sqlite` for every other database — each a consistent
/// snapshot of its store, taken while the agent keeps running and replicating
/// (`DocumentStore.backup`), 0600 — `attachments/` with the content their revisions name, each
/// file checked against its digest as it is copied, and `canopy.conf`; with `with_identity`, also
/// `identity.key`. Content that could not be copied (damaged here) fails the request, naming it,
/// after everything else was written. Restoring: `canopyd run --data-dir PATH` with the identity (the same node,
/// which catches up from its peers what it lacks), or `canopyd init --data-dir PATH` without it
/// (a new node that starts with these documents and keeps the configured peers, who must allow
/// its new id).
///
/// The directory holds `backup-unfinished` (`DataDirectory.unfinishedBackupPath`) from its start
/// until every file in it is written and synced, and keeps it, saying why, when content could
/// not be copied: `canopyd run` and `init` refuse such a directory. A backup cut short (the agent
/// killed, the target disk full) used to be restored by `canopyd init`, as the start of
/// `canopyd run` advised for a directory without its config, into a node without part of its
/// attachment content.
extension Agent {
    func backup(_ command: Admin.Backup, _ reply: @escaping TypedAdminRoute<Admin.Backup>.Reply) throws(AdminFailure) {
        let path = command.path
        let withIdentity = command.withIdentity ?? false
        let target = DataDirectory(path: path)
        try Self.prepareBackupDirectory(path)
        do {
            try DataDirectory.writeFileAtomically(
                target.unfinishedBackupPath, Array("the backup started at \(Self.wallClock()) s since 1970 and did not finish\n".utf8),
                mode: 0o600)
            try DataDirectory.sync(path)
        } catch {
            throw AdminFailure(.failed, "cannot mark \(path) as a backup in progress: \(error)")
        }
        let source = options.directory
        // The stores are read on the store's queue; the copies are made off it: a large store
        // takes seconds to copy, and admin document commands need not wait for it (each snapshot
        // has its own connection).
        storeQueue.async { [self] in
            let stores = databases.sorted
            DispatchQueue.global().async {
                Self.backUp(stores, from: source, to: target, withIdentity: withIdentity, reply)
            }
        }
    }

    private static func backUp(
        _ stores: [(key: DatabaseName, value: DocumentStore)], from source: DataDirectory, to target: DataDirectory,
        withIdentity: Bool, _ reply: @escaping TypedAdminRoute<Admin.Backup>.Reply
    ) {
        let path = target.path
        do {
            var documents = 0
            var bytes = 0
            var attachmentFiles = 0
            var attachmentBytes: Int64 = 0
            var problems: [String] = []
            if stores.count > 1 { try target.createDatabasesDirectory() }
            let attachments = AttachmentStore(directory: target.attachmentsPath)
            for (name, store) in stores {
                let file = target.databasePath(name)
                let written = try store.backup(to: file, attachmentsTo: attachments)
                documents += written.documents
                attachmentFiles += written.attachmentFiles
                attachmentBytes += written.attachmentBytes
                problems += written.attachmentProblems.map { name == .default ? $0 : "database \(name): \($0)" }
                guard chmod(file, 0o600) == 0 else { throw AdminFailure(.failed, "cannot chmod \(file)") }
                bytes += (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
            }
            try DataDirectory.writeFileAtomically(
                    target.configPath, [UInt8](try Data(contentsOf: URL(fileURLWithPath: source.configPath))), mode: 0o600)
            if withIdentity {
                try DataDirectory.writeFileAtomically(
                    target.identityPath, [UInt8](try Data(contentsOf: URL(fileURLWithPath: source.identityPath))), mode: 0o600)
            }
            guard problems.isEmpty else {
                let lacking = "it lacks \(problems.count) attachment content file\(problems.count == 1 ? "" : "s") that could not be copied: "
                    + problems.prefix(5).joined(separator: "; ") + (problems.count > 5 ? "; …" : "")
                try? DataDirectory.writeFileAtomically(target.unfinishedBackupPath, Array((lacking + "\n").utf8), mode: 0o600)
                throw AdminFailure(
                    .failed,
                    "\(path) holds the documents, but \(lacking); canopyd will not restore it (\(target.unfinishedBackupPath) says why). "
                        + "`canopyctl check` lists the content damaged on this node")
            }
            try Self.finish(target, databases: stores.map { target.databasePath($0.key) }, withIdentity: withIdentity)
            reply(.success(Admin.Backup.Reply(
                path: path, bytes: Int64(bytes), documents: Int64(documents), databases: Int64(stores.count), withIdentity: withIdentity,
                attachments: Int64(attachmentFiles), attachmentBytes: attachmentBytes)))
        } catch let failure as AdminFailure {
            reply(.failure(failure))
        } catch {
            reply(.failure(AdminFailure(.failed, "backup to \(path) failed: \(error)")))
        }
    }

    /// Syncs every file of the backup `target` (the databases, each attachment file and the
    /// directories holding them, the config and identity), then removes its `backup-unfinished`
    /// marker and syncs the directory: a crash at any moment leaves either the marker or a whole
    /// backup.
    private static func finish(_ target: DataDirectory, databases: [String], withIdentity: Bool) throws(AgentError) {
        var files = databases + [target.configPath]
        if withIdentity { files.append(target.identityPath) }
        let attachments = (try? FileManager.default.contentsOfDirectory(atPath: target.attachmentsPath)) ?? []
        files += attachments.map { target.attachmentsPath + "/" + $0 }
        if !attachments.isEmpty { files.append(target.attachmentsPath) }
        if databases.count > 1 { files.append(target.databasesPath) }
        for file in files { try DataDirectory.sync(file) }
        try DataDirectory.sync(target.path)
        guard unlink(target.unfinishedBackupPath) == 0 else {
            throw .system(SystemError("remove", target.unfinishedBackupPath))
        }
        try DataDirectory.sync(target.path)
    }

    /// Creates the backup directory (0700), refusing one that exists with anything in it.
    private static func prepareBackupDirectory(_ path: String) throws(AdminFailure) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue, (try? FileManager.default.contentsOfDirectory(atPath: path))?.isEmpty == true else {
                throw AdminFailure(.invalidArgument, "\(path) exists and is not an empty directory; give a new path")
            }
        }
        do {
            try DataDirectory(path: path).create()
        } catch {
            throw AdminFailure(.failed, "cannot create \(path): \(error)")
        }
    }
}

/// `check`: SQLite's full integrity check of every database, each on a connection of its own (the
/// agent keeps serving meanwhile), every document row checked against itself and its revisions
/// (`DocumentStore.checkRows`: damage that leaves a row well formed, reported by document and
/// through the damage handler, so `status` and `document.damaged` events count it too), then
/// every attachment content the databases' stored revisions name, read whole and checked against
/// its digest. A problem in a database other than `default`
/// is prefixed with its name. Files an interrupted upload left are listed apart (`leftovers`):
/// they take space, but no revision names them, so the data is sound.
extension Agent {
    /// `check {attachments?}`: `attachments` false leaves the attachment content unread.
    func check(_ command: Admin.Check, _ reply: @escaping TypedAdminRoute<Admin.Check>.Reply) {
        let attachments = command.attachments ?? true
        storeQueue.async { [self] in
            let stores = databases.sorted
            DispatchQueue.global().async { Self.check(stores, attachments: attachments, reply) }
        }
    }

    private static func check(
        _ stores: [(key: DatabaseName, value: DocumentStore)], attachments checksContent: Bool, _ reply: @escaping TypedAdminRoute<Admin.Check>.Reply
    ) {
        let started = DispatchTime.now().uptimeNanoseconds
        do throws(StoreError) {
            var problems: [String] = []
            var damaged: [Admin.DamageRow] = []
            var documents = 0
            var named = Set<AttachmentDigest>()
            for (name, store) in stores {
                let prefix = name == .default ? "" : "database \(name): "
                problems += try store.checkIntegrity(full: true).map { prefix + $0 }
                let rows: RowCheckReport
                do {
                    rows = try store.checkRows(problemsMax: 100)
                } catch let error where error.isCorruption {
                    // Too damaged to read row by row: the integrity check said so already.
                    problems.append(prefix + "its document rows cannot be read: \(error)")
                    continue
                }
                documents += rows.documents
                for damage in rows.damaged {
                    let revision = damage.revision.map { " revision \($0)" } ?? ""
                    problems.append(prefix + "document \"\(damage.documentID)\"\(revision): \(damage.reason)")
                }
                damaged += Self.damageRows(rows.damaged, database: name)
                if rows.truncated { problems.append(prefix + "more damaged documents than the first 100 listed") }
                if rows.strayRevisionRows > 0 {
                    problems.append(prefix + "\(rows.strayRevisionRows) revision rows belong to no document row (a document's row was lost)")
                }
                if rows.differingDigestBuckets > 0 {
                    problems.append(prefix + "\(rows.differingDigestBuckets) digest buckets disagree with the document rows (the database's digest is wrong)")
                }
                if rows.digestIndexDisagreements > 0 {
                    problems.append(prefix + "\(rows.digestIndexDisagreements) rows of the digest index disagree with the document rows (a compare would miss those documents)")
                }
                // Content set-aside revisions wait for may still be on its way: not counted.
                if checksContent { named.formUnion(try store.namedAttachmentDigests(includingSetAside: false)) }
            }
            var verified = 0
            var bytes: Int64 = 0
            if let attachments = stores.first?.value.attachments {
                for digest in named.sorted(by: { $0.hex < $1.hex }) {
                    do {
                        try attachments.read(digest) { part in bytes += Int64(part.count) }
                        verified += 1
                    } catch let error as StoreError {
                        problems.append("attachment \(digest): \(error.detail)")
                    } catch {
                        problems.append("attachment \(digest): \(error)")
                    }
                }
            }
            // Files of uploads that never finished, which no upload of this agent writes: what an
            // agent killed during an upload left (the next start removes them).
            let leftovers = (stores.first?.value.attachments.leftoverIncoming() ?? []).map { file in
                "attachments/\(file.name): \(file.bytes) bytes of an unfinished upload; removed when the agent next starts"
            }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            reply(.success(Admin.Check.Reply(
                sound: problems.isEmpty, problems: problems, leftovers: leftovers, documents: Int64(documents), damaged: damaged,
                seconds: (seconds * 1000).rounded() / 1000, attachments: Int64(verified), attachmentBytes: bytes)))
        } catch {
            reply(.failure(AdminFailure(.failed, "the check could not run: \(error)")))
        }
    }
}
