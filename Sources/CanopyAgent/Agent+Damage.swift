import CanopyAdmin
import CanopyCore
import CanopyStore
import Dispatch
import Logging

/// Damage found in the store's file while the agent runs (`StoredDamage`): a document whose id
/// is not valid UTF-8, or a revision whose stored body no longer matches its id. The store leaves
/// it out of what it reads, so it is never sent to a peer; the agent makes it visible: the
/// `document.damaged` event, `damaged`/`last_damage` in `status`, and a rate-limited error line
/// in the log. The repair is the operator's (Tools/canopyd/README.md, *Backups*): restore from a backup, after
/// which peers send back what the backup lacks.
extension Agent {
    /// Called by the store of `database` on the reading thread, the first time it finds each
    /// damaged document or revision.
    func storeFoundDamage(_ damage: StoredDamage, in database: DatabaseName = .default) {
        queue.async { [self] in
            damageFound.count += 1
            damageFound.last = damage
            damageFound.log.log(
                .error, kind: "damaged document",
                "\(options.directory.databasePath(database)): \(StoreError.damaged(damage).description); it is not sent to peers. Run `canopyctl check` and restore the data directory from a backup (Tools/canopyd/README.md, Backups)")
        }
        events.emit(Admin.DocumentEvent(.damaged, db: database.text, doc: damage.documentID, rev: damage.revision, reason: damage.reason))
    }

    /// The last damage found since the agent started, as `status` shows it.
    var lastDamage: Admin.Damage? {
        dispatchPrecondition(condition: .onQueue(queue))
        return damageFound.last.map { Admin.Damage(doc: $0.documentID, rev: $0.revision?.description, reason: $0.reason) }
    }
}

/// What the agent has seen of damage in its store, on its queue, and where it logs it.
struct DamageFound {
    /// Error lines for damaged documents: a damaged file can hold many.
    let log: RateLimitedLog
    var count = 0
    var last: StoredDamage?
}
