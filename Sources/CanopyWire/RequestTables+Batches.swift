import CanopyCore

/// One `changes` request in flight, from either side, through its phases (§7.3):
///
///     awaitingReply ──reply, nothing missing──▶ (done)
///           └──reply with missing revisions──▶ transferring ──revisions(final)──▶ awaitingAck ──ack──▶ (done)
///
/// An `error` naming the request ends it in any phase.
struct Batch: Sendable {
    /// A revision the target asked for: an entry index and a revision index in it.
    struct Missing: Sendable, Equatable {
        var entry: Int
        var revision: Int
    }

    enum Phase: Sendable {
        case awaitingReply
        /// `missing` is the reply's flattened list (entries ascending, then revision indices);
        /// `cursor` the position after the last revision sent; `known` the known ancestors per entry.
        case transferring(missing: [Missing], known: [[RevisionID]], cursor: Int)
        case awaitingAck
    }

    let changes: Changes
    var phase: Phase = .awaitingReply

    init(changes: Changes) {
        self.changes = changes
    }

    /// Checks a reply against the request and flattens its missing revisions. Nil when nothing is
    /// missing (the request is then complete).
    func transferPhase(for reply: ChangesReply) throws(ProtocolError) -> Phase? {
        guard reply.items.count == changes.entries.count else {
            throw .invalidReference(detail: "reply has \(reply.items.count) items for \(changes.entries.count) entries")
        }
        var missing: [Missing] = []
        missing.reserveCapacity(reply.items.count)
        for (entryIndex, item) in reply.items.enumerated() {
            let revisionCount = changes.entries[entryIndex].revisions.count
            for revision in item.missing {
                guard revision < revisionCount else {
                    throw .invalidReference(detail: "entry \(entryIndex) has no revision \(revision)")
                }
                missing.append(Missing(entry: entryIndex, revision: revision))
            }
        }
        if missing.isEmpty { return nil }
        return .transferring(missing: missing, known: reply.items.map(\.knownAncestors), cursor: 0)
    }
}

extension RequestTables {
    /// A peer's `changes`: fresh request id, within our window, for a subscription of ours (or
    /// one we just ended), sequences above the subscription's last. Ends a one-shot subscription
    /// on `caughtUp`.
    mutating func receiveChanges(_ changes: Changes, window: Int) throws(ProtocolError) {
        let id = changes.requestID
        guard !peerUses(id) else { throw .duplicateRequestID(requestID: id) }
        guard incomingBatches.count < window else { throw .windowExceeded(what: "changes requests", limit: window) }
        let subscriptionID = changes.subscriptionID
        let lastSequence: UInt64
        if let subscription = ourSubscriptions[subscriptionID] {
            lastSequence = subscription.lastSequence
        } else if let ended = endedSubscriptions[subscriptionID] {
            lastSequence = ended
        } else {
            throw .invalidReference(detail: "changes for subscription \(subscriptionID), which is not ours or is complete")
        }
        if let first = changes.entries.first, first.sequence <= lastSequence {
            throw .invalidValue(field: "changes.sequence (not above the subscription's last)", value: first.sequence)
        }
        let newLast = changes.entries.last?.sequence ?? lastSequence
        if var subscription = ourSubscriptions[subscriptionID] {
            subscription.lastSequence = newLast
            // A one-shot subscription ends with the batch that catches up.
            if changes.caughtUp && !subscription.continuous {
                ourSubscriptions[subscriptionID] = nil
            } else {
                ourSubscriptions[subscriptionID] = subscription
            }
        } else {
            endedSubscriptions[subscriptionID] = newLast
        }
        incomingBatches[id] = Batch(changes: changes)
    }

    /// A reply to one of our `changes` awaiting it; nothing missing completes the batch.
    mutating func receiveChangesReply(_ reply: ChangesReply) throws(ProtocolError) {
        guard let batch = outgoingBatches[reply.requestID], case .awaitingReply = batch.phase else {
            throw .unknownRequest(messageType: "changesReply", requestID: reply.requestID)
        }
        if let phase = try batch.transferPhase(for: reply) {
            outgoingBatches[reply.requestID]!.phase = phase
        } else {
            outgoingBatches[reply.requestID] = nil
        }
    }

    /// Validates received revisions against what we asked for and resolves each into a path.
    mutating func receiveRevisions(_ revisions: Revisions) throws(ProtocolError) -> [ReceivedRevision] {
        let id = revisions.requestID
        guard let batch = incomingBatches[id], case .transferring(let missing, let known, var cursor) = batch.phase else {
            throw .unknownRequest(messageType: "revisions", requestID: id)
        }
        var received: [ReceivedRevision] = []
        received.reserveCapacity(revisions.revisions.count)
        for transfer in revisions.revisions {
            let position = cursor + transfer.skip
            guard position < missing.count else {
                throw .invalidReference(detail: "revision position \(position) of \(missing.count) asked for")
            }
            cursor = position + 1
            let wanted = missing[position]
            let entry = batch.changes.entries[wanted.entry]
            let path = try Self.path(of: entry.revisions[wanted.revision], transfer: transfer,
                                     known: known[wanted.entry])
            received.append(ReceivedRevision(
                docID: entry.docID, sequence: entry.sequence, path: path, body: transfer.body, importedID: transfer.importedID))
        }
        incomingBatches[id]!.phase = revisions.final ? .awaitingAck : .transferring(missing: missing, known: known, cursor: cursor)
        return received
    }

    /// The path of a transferred revision: its ancestry digests at consecutive generations, then
    /// the known ancestor the source stopped at, if any, or the link to the revision it was cut
    /// above (the path's root parent).
    private static func path(of leaf: LeafRevision, transfer: RevisionTransfer, known: [RevisionID]) throws(ProtocolError) -> RevisionPath {
        let generation = leaf.id.generation
        let count = transfer.ancestry.count
        guard count < generation else {
            throw .invalidAncestry(detail: "\(count) ancestors for generation \(generation)")
        }
        // Histories longer than our revsLimit are accepted (§6.6): the source sends every link it
        // holds, and the store stems to its own limit after merging.
        guard count < WireLimits.revsLimitMax else {
            throw .invalidAncestry(detail: "\(count) ancestors beyond revsLimitMax \(WireLimits.revsLimitMax)")
        }
        var ancestors = transfer.ancestry.enumerated().map { offset, digest in
            digest.revisionID(generation: generation - 1 - offset)
        }
        if transfer.knownAncestorTail > 0 {
            guard transfer.knownAncestorTail <= known.count else {
                throw .invalidReference(detail: "known ancestor \(transfer.knownAncestorTail) of \(known.count)")
            }
            let ancestor = known[transfer.knownAncestorTail - 1]
            guard ancestor.generation == generation - 1 - count else {
                throw .invalidAncestry(detail: "known ancestor at generation \(ancestor.generation), expected \(generation - 1 - count)")
            }
            ancestors.append(ancestor)
        }
        var rootParent: RevisionID?
        if let cutParent = transfer.cutParent {
            guard count + 1 < generation else {
                throw .invalidAncestry(detail: "a cut parent below generation 1 for generation \(generation)")
            }
            rootParent = cutParent.revisionID(generation: generation - 1 - count)
        }
        do {
            return try RevisionPath(leaf: leaf.id, kind: leaf.kind, ancestors: ancestors, rootParent: rootParent)
        } catch {
            throw .invalidAncestry(detail: error.description)
        }
    }

    /// An ack for one of our batches whose final `revisions` we sent; completes it.
    mutating func receiveRevisionsAck(_ ack: RevisionsAck) throws(ProtocolError) {
        guard let batch = outgoingBatches[ack.requestID], case .awaitingAck = batch.phase else {
            throw .unknownRequest(messageType: "revisionsAck", requestID: ack.requestID)
        }
        outgoingBatches[ack.requestID] = nil
    }

    /// Our `changes`: within the peer's window, for a subscription the peer holds.
    mutating func sendChanges(_ changes: Changes, peerWindow: Int) {
        precondition(!weUse(changes.requestID), "request id in use")
        precondition(outgoingBatches.count < peerWindow, "changes beyond the peer's window")
        let subscriptionID = changes.subscriptionID
        guard var subscription = peerSubscriptions[subscriptionID] else {
            preconditionFailure("changes for a subscription the peer does not have")
        }
        if let first = changes.entries.first { precondition(first.sequence > subscription.lastSequence, "sequence went back") }
        subscription.lastSequence = changes.entries.last?.sequence ?? subscription.lastSequence
        peerSubscriptions[subscriptionID] = changes.caughtUp && !subscription.continuous ? nil : subscription
        outgoingBatches[changes.requestID] = Batch(changes: changes)
    }

    /// Our reply to the peer's `changes`; it must match the request.
    mutating func sendChangesReply(_ reply: ChangesReply) {
        guard let batch = incomingBatches[reply.requestID], case .awaitingReply = batch.phase else {
            preconditionFailure("changesReply for no outstanding changes")
        }
        do {
            if let phase = try batch.transferPhase(for: reply) {
                incomingBatches[reply.requestID]!.phase = phase
            } else {
                incomingBatches[reply.requestID] = nil
            }
        } catch {
            preconditionFailure("our changesReply does not match the request: \(error)")
        }
    }

    /// Our `revisions`, only for revisions the peer asked for, in order.
    mutating func sendRevisions(_ revisions: Revisions) {
        guard let batch = outgoingBatches[revisions.requestID], case .transferring(let missing, let known, var cursor) = batch.phase else {
            preconditionFailure("revisions for no request awaiting them")
        }
        for transfer in revisions.revisions {
            cursor += transfer.skip + 1
            precondition(cursor <= missing.count, "revision beyond those asked for")
        }
        outgoingBatches[revisions.requestID]!.phase =
            revisions.final ? .awaitingAck : .transferring(missing: missing, known: known, cursor: cursor)
    }

    /// Our ack, only after the peer's final `revisions` of the request.
    mutating func sendRevisionsAck(_ ack: RevisionsAck) {
        guard let batch = incomingBatches[ack.requestID], case .awaitingAck = batch.phase else {
            preconditionFailure("revisionsAck before the final revisions")
        }
        incomingBatches[ack.requestID] = nil
    }
}
