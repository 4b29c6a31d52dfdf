/// The bookkeeping behind `ConnectionStateMachine`: every request outstanding in each direction,
/// keyed by request id. "Peer" tables hold requests the peer sent us (it chose the ids); "our"
/// tables hold requests we sent. Dictionaries here are only looked up and counted, never iterated,
/// so their order cannot reach the wire or a decision.
///
/// Bounds: peer-controlled tables are capped by limits checked before inserting
/// (`subscriptionsMax`, `inFlightRequestsMax`, our announced window); our own tables are bounded
/// by what our engine sends. `endedSubscriptions` keeps one id per subscription we ended, so a
/// `changes` already in flight when we unsubscribed is still answered.
struct RequestTables: Sendable {
    /// Requests other than batches and subscriptions.
    enum RequestKind: Sendable, Equatable { case checkpointGet, checkpointSet, attachmentGet, digestGet }

    /// A subscription, from either side.
    struct Subscription: Sendable {
        var continuous: Bool
        /// The last sequence sent in a `changes` for it (initially `since`).
        var lastSequence: UInt64
    }

    var peerSubscriptions: [RequestID: Subscription] = [:]
    var peerRequests: [RequestID: RequestKind] = [:]
    var incomingBatches: [RequestID: Batch] = [:]

    var ourSubscriptions: [RequestID: Subscription] = [:]
    var endedSubscriptions: [RequestID: UInt64] = [:]
    var ourRequests: [RequestID: RequestKind] = [:]
    var outgoingBatches: [RequestID: Batch] = [:]

    /// True if the peer has a request or subscription outstanding with this id.
    func peerUses(_ id: RequestID) -> Bool {
        peerSubscriptions[id] != nil || peerRequests[id] != nil || incomingBatches[id] != nil
    }

    /// True if we have a request or subscription outstanding with this id.
    func weUse(_ id: RequestID) -> Bool {
        ourSubscriptions[id] != nil || ourRequests[id] != nil || outgoingBatches[id] != nil
    }

    /// A peer's `subscribe`: fresh id, at most `subscriptionsMax` active.
    mutating func receiveSubscribe(_ subscribe: Subscribe) throws(ProtocolError) {
        guard !peerUses(subscribe.requestID) else { throw .duplicateRequestID(requestID: subscribe.requestID) }
        guard peerSubscriptions.count < WireLimits.subscriptionsMax else {
            throw .windowExceeded(what: "subscriptions", limit: WireLimits.subscriptionsMax)
        }
        peerSubscriptions[subscribe.requestID] = Subscription(continuous: subscribe.continuous, lastSequence: subscribe.since)
    }

    /// A peer's `unsubscribe` of one of its active subscriptions.
    mutating func receiveUnsubscribe(_ unsubscribe: Unsubscribe) throws(ProtocolError) {
        guard peerSubscriptions.removeValue(forKey: unsubscribe.subscriptionID) != nil else {
            throw .invalidReference(detail: "unsubscribe names no active subscription")
        }
    }

    /// A peer's checkpoint or attachment request: fresh id, at most `inFlightRequestsMax` outstanding.
    mutating func receivePeerRequest(_ id: RequestID, kind: RequestKind) throws(ProtocolError) {
        guard !peerUses(id) else { throw .duplicateRequestID(requestID: id) }
        guard peerRequests.count < WireLimits.inFlightRequestsMax else {
            throw .windowExceeded(what: "requests", limit: WireLimits.inFlightRequestsMax)
        }
        peerRequests[id] = kind
    }

    /// A reply that must answer one of our requests of `kind`.
    mutating func receiveReply(_ id: RequestID, to kind: RequestKind, _ message: Message) throws(ProtocolError) {
        guard ourRequests[id] == kind else {
            throw .unknownRequest(messageType: message.type.description, requestID: id)
        }
        ourRequests[id] = nil
    }

    /// An `error` ends the request it names, whichever kind it is; id 0 names none.
    mutating func receiveError(_ error: ErrorMessage) throws(ProtocolError) {
        let id = error.requestID
        if id == 0 { return }
        if let subscription = ourSubscriptions.removeValue(forKey: id) {
            endedSubscriptions[id] = subscription.lastSequence
        } else if ourRequests.removeValue(forKey: id) == nil, outgoingBatches.removeValue(forKey: id) == nil {
            throw .unknownRequest(messageType: "error", requestID: id)
        }
    }

    /// Records a message we send; a breach of the rules is our bug.
    mutating func send(_ message: Message, peerWindow: Int) {
        switch message {
        case .subscribe(let subscribe):
            precondition(!weUse(subscribe.requestID), "request id in use")
            precondition(ourSubscriptions.count < WireLimits.subscriptionsMax, "more subscriptions than the peer accepts")
            ourSubscriptions[subscribe.requestID] = Subscription(continuous: subscribe.continuous, lastSequence: subscribe.since)
        case .unsubscribe(let unsubscribe):
            let subscription = ourSubscriptions.removeValue(forKey: unsubscribe.subscriptionID)
            precondition(subscription != nil, "unsubscribe from an inactive subscription")
            endedSubscriptions[unsubscribe.subscriptionID] = subscription!.lastSequence
        case .checkpointGet(let get): sendRequest(get.requestID, kind: .checkpointGet)
        case .checkpointSet(let set): sendRequest(set.requestID, kind: .checkpointSet)
        case .checkpoint(let reply):
            precondition(peerRequests.removeValue(forKey: reply.requestID) == .checkpointGet, "no such checkpointGet")
        case .checkpointSetAck(let ack):
            precondition(peerRequests.removeValue(forKey: ack.requestID) == .checkpointSet, "no such checkpointSet")
        case .attachmentGet(let get): sendRequest(get.requestID, kind: .attachmentGet)
        case .attachmentPart(let part):
            precondition(peerRequests.removeValue(forKey: part.requestID) == .attachmentGet, "no such attachmentGet")
        case .digestGet(let get): sendRequest(get.requestID, kind: .digestGet)
        case .digestNodes(let nodes):
            precondition(peerRequests.removeValue(forKey: nodes.requestID) == .digestGet, "no such digestGet")
        case .error(let error):
            let id = error.requestID
            if id == 0 { return }
            let ended = peerSubscriptions.removeValue(forKey: id) != nil || peerRequests.removeValue(forKey: id) != nil
                || incomingBatches.removeValue(forKey: id) != nil
            precondition(ended, "error for a request the peer does not have outstanding")
        case .changes(let changes): sendChanges(changes, peerWindow: peerWindow)
        case .changesReply(let reply): sendChangesReply(reply)
        case .revisions(let revisions): sendRevisions(revisions)
        case .revisionsAck(let ack): sendRevisionsAck(ack)
        case .hello, .close, .heartbeat, .heartbeatEcho: break
        }
    }

    /// Records one of our checkpoint or attachment requests.
    private mutating func sendRequest(_ id: RequestID, kind: RequestKind) {
        precondition(!weUse(id), "request id in use")
        precondition(ourRequests.count < WireLimits.inFlightRequestsMax, "more requests than the peer accepts")
        ourRequests[id] = kind
    }
}
