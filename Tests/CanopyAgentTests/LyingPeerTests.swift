import CanopyCore
import CanopyCrypto
import CanopyReplication
import CanopyStore
import CanopyWire
import Dispatch
import Foundation
import Testing

@testable import CanopyAgent

#if canImport(Glibc)
import Glibc
#endif

/// A peer that the agent allows but that breaks the rules of the version-2 connection, driven by
/// hand over real TCP and the real handshake, next to an honest peer that must not notice.
@Suite("a peer that lies to a real agent", .serialized)
struct LyingPeerTests {
    /// Connects to `address` (127.0.0.1:PORT) and runs the handshake as `identity`.
    static func connect(to address: HostPort, as identity: Identity, expecting peer: NodeID, delivery: DispatchQueue) throws -> ChannelTransport {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SystemError("socket") }
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_port = address.port.bigEndian
        target.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw SystemError("connect") }
        try Socket.setNonBlocking(fd)
        let queue = DispatchQueue(label: "test.liar")
        let connection = StreamConnection(fd: fd, queue: queue, pendingWriteBytesMax: AgentLimits.peerPendingWriteBytesMax)
        let configuration = HandshakeConfiguration(identity: identity, authorizer: AllowList([peer]), pendingPeers: nil, remoteAddress: "agent")
        let done = DispatchSemaphore(value: 0)
        final class Outcome: @unchecked Sendable { var value: Result<ChannelTransport, CryptoError>? }
        let outcome = Outcome()
        queue.async {
            HandshakeDriver(connection: connection, initiator: true, configuration: configuration, deliveryQueue: delivery) { result in
                outcome.value = result
                done.signal()
            }.start()
        }
        guard done.wait(timeout: .now() + 30) == .success, let result = outcome.value else { throw SystemError("handshake", code: ETIMEDOUT) }
        return try result.get()
    }

    @Test("asking for a database not shared with it is refused and listed as pending; revisions pushed unasked end their channel and nothing is stored; a message for a channel never opened closes the connection with the reason; an honest peer replicates on")
    func lyingPeerIsRefusedAndOthersGoOn() throws {
        let a = try InProcessReplicationTests.Node(name: "a")
        let b = try InProcessReplicationTests.Node(name: "b")
        defer {
            a.stop()
            b.stop()
        }
        try a.allow(b)
        try b.allow(a)
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: 9, count: DeterministicEntropy.seedBytes))
        let liar = Identity.generate(random: &entropy)
        let admin = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60)
        #expect(try admin.request("peer.add", ["node_id": .string(liar.nodeID.description), "address": .string("-")])["ok"] == .bool(true))
        #expect(try admin.request("db.create", ["name": .string("secret")])["ok"] == .bool(true))

        let delivery = DispatchQueue(label: "test.liar.delivery")
        let address = a.agent.queue.sync { a.agent.listening!.address }
        let transport = try Self.connect(to: address, as: liar, expecting: try #require(AgentIdentity.nodeID(a.agent.nodeID)), delivery: delivery)
        let received = ConnectionEventLog()
        transport.start { received.append($0) }
        transport.send(.hello(ConnectionHello(nodeID: [UInt8](repeating: 9, count: 16))))
        let hello = received.next { if case .message(.hello) = $0 { return true } else { return false } }
        #expect(hello != nil, "the agent answers with its connection hello")

        // A database it was not given.
        transport.send(.attach(Attach(channel: 1, database: DatabaseName(validating: "secret")!)))
        guard case .message(.detach(let refusal))? = received.next(where: { if case .message(.detach) = $0 { true } else { false } }) else {
            Issue.record("no refusal of the attach")
            return
        }
        #expect(refusal.channel == 1 && refusal.code == .forbidden && refusal.message.contains("not shared with you"), "\(refusal)")
        var pending: [String: JSONValue]?
        if case .array(let rows)? = try admin.request("db.pending")["pending"] { pending = rows.first?.objectValue }
        #expect(pending?["db"] == .string("secret") && pending?["node_id"] == .string(liar.nodeID.description), "\(String(describing: pending))")

        // Revisions pushed into a database it may write, but never asked for: its channel ends
        // with the reason and nothing is stored.
        transport.send(.attach(Attach(channel: 3, database: .default)))
        guard case .message(.attach(let echo))? = received.next(where: { if case .message(.attach) = $0 { true } else { false } }) else {
            Issue.record("default was not opened")
            return
        }
        #expect(echo.channel == 3)
        transport.send(.channel(3, .hello(Hello(databaseID: [UInt8](repeating: 7, count: 16), revsLimit: 1000, window: 4))))
        let forged = RevisionTransfer(ancestry: [], knownAncestorTail: 0, body: Array(#"{"forged":true}"#.utf8))
        transport.send(.channel(3, .revisions(Revisions(requestID: 77, final: true, revisions: [forged]))))
        guard case .message(.channel(3, .close(let said)))? = received.next(where: {
            if case .message(.channel(3, .close)) = $0 { true } else { false }
        }) else {
            Issue.record("the session on the channel did not close")
            return
        }
        #expect(said.code == .invalidReference && said.reason.contains("unknown request"), "\(said)")
        guard case .message(.detach(let ended))? = received.next(where: { if case .message(.detach(let d)) = $0 { d.channel == 3 } else { false } }) else {
            Issue.record("the channel carrying unrequested revisions was not ended")
            return
        }
        #expect(ended.message.contains("unknown request 77"), "\(ended)")
        #expect(try a.agent.store.documentCount == 0, "nothing of the forged push was stored")

        // A message for a channel that was never opened: the connection ends, with the reason.
        transport.send(.channel(41, .heartbeat))
        guard case .message(.close(let close))? = received.next(where: { if case .message(.close) = $0 { true } else { false } }) else {
            Issue.record("the agent did not close the connection")
            return
        }
        #expect(close.code == .invalidReference, "\(close)")

        // The honest peer never noticed: a write on A still reaches B.
        let rev = try a.agent.store.put(id: "after-the-liar", body: .object(["ok": .bool(true)]), replacing: nil)
        let commits = DispatchSemaphore(value: 0)
        let token = b.agent.store.addCommitObserver { commits.signal() }
        defer { token.cancel() }
        while (try? b.agent.store.get(id: "after-the-liar").revision) != rev {
            guard commits.wait(timeout: .now() + 60) == .success else {
                Issue.record("the honest peer stopped replicating")
                return
            }
        }
    }

    /// Stores `bytes` and writes document `id` of `store` naming them; returns the digest.
    static func attach(_ bytes: [UInt8], as id: String, in store: DocumentStore) throws -> AttachmentDigest {
        let upload = try store.attachments.beginUpload(length: Int64(bytes.count), from: "a test")
        try bytes.withUnsafeBytes { raw in try upload.write(raw) }
        let content = try upload.finishPinned()
        defer { content.pin.release() }
        let stub = AttachmentMetadata(contentType: "application/octet-stream", length: Int64(bytes.count), digest: content.digest, revpos: 1)
        try store.put(id: id, body: Attachments.body(.object(["id": .string(id)]), with: ["file": stub]), replacing: nil)
        return content.digest
    }

    @Test("a peer allowed one database that asks for attachment content only another database names, by its digest, is told it is not here; content its database names is sent")
    func attachmentsOfAnotherDatabaseAreNotSent() throws {
        let a = try InProcessReplicationTests.Node(name: "a")
        defer { a.stop() }
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: 11, count: DeterministicEntropy.seedBytes))
        let peer = Identity.generate(random: &entropy)
        let admin = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60)
        #expect(try admin.request("peer.add", ["node_id": .string(peer.nodeID.description), "address": .string("-")])["ok"] == .bool(true))
        #expect(try admin.request("db.create", ["name": .string("secret")])["ok"] == .bool(true))
        let secret = try #require(a.agent.databases[DatabaseName(validating: "secret")!])
        #expect(secret.attachments.sharesDirectory(with: a.agent.store.attachments), "the agent's databases share DIR/attachments")

        let hidden = try Self.attach([UInt8](repeating: 0x5A, count: 3000), as: "payroll", in: secret)
        let open = [UInt8]((0..<3000).map { UInt8(truncatingIfNeeded: $0) })
        let visible = try Self.attach(open, as: "readme", in: a.agent.store)

        let address = a.agent.queue.sync { a.agent.listening!.address }
        let transport = try Self.connect(
            to: address, as: peer, expecting: try #require(AgentIdentity.nodeID(a.agent.nodeID)), delivery: DispatchQueue(label: "test.peer.delivery"))
        let received = ConnectionEventLog()
        transport.start { received.append($0) }
        transport.send(.hello(ConnectionHello(nodeID: [UInt8](repeating: 11, count: 16))))
        #expect(received.next { if case .message(.hello) = $0 { true } else { false } } != nil)
        transport.send(.attach(Attach(channel: 1, database: .default)))
        #expect(received.next { if case .message(.attach) = $0 { true } else { false } } != nil, "default was not opened")
        transport.send(.channel(1, .hello(Hello(features: Hello.attachmentsFeature, databaseID: [UInt8](repeating: 8, count: 16), revsLimit: 1000, window: 4))))
        #expect(received.next { if case .message(.channel(1, .hello)) = $0 { true } else { false } } != nil, "no session hello on the channel")

        transport.send(.channel(1, .attachmentGet(AttachmentGet(requestID: 5, digest: hidden.bytes, offset: 0, maxBytes: 1000))))
        guard case .message(.channel(1, .error(let refusal)))? = received.next(where: {
            if case .message(.channel(1, .error(let e))) = $0 { e.requestID == 5 } else if case .message(.channel(1, .attachmentPart(let p))) = $0 { p.requestID == 5 } else { false }
        }) else {
            Issue.record("the content of the database the peer may not replicate was sent, or nothing came")
            return
        }
        #expect(refusal.code == .notFound, "\(refusal)")
        transport.send(.channel(1, .attachmentGet(AttachmentGet(requestID: 6, digest: visible.bytes, offset: 0, maxBytes: 1000))))
        guard case .message(.channel(1, .attachmentPart(let part)))? = received.next(where: {
            if case .message(.channel(1, .attachmentPart(let p))) = $0 { p.requestID == 6 } else if case .message(.channel(1, .error(let e))) = $0 { e.requestID == 6 } else { false }
        }) else {
            Issue.record("the content the shared database names was not sent")
            return
        }
        #expect(part.length == 3000 && part.data == Array(open[0..<1000]))
    }

    @Test("a peer may fetch only content that a document it may read names: nothing with a write-only share, and with a prefix only what a document of that prefix names")
    func attachmentsPastAShareAreNotSent() throws {
        let a = try InProcessReplicationTests.Node(name: "a")
        defer { a.stop() }
        let admin = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60)
        let secret = try Self.attach([UInt8](repeating: 0x11, count: 2000), as: "secret:plan", in: a.agent.store)
        let public_ = try Self.attach([UInt8](repeating: 0x22, count: 2000), as: "pub:readme", in: a.agent.store)

        func fetches(seed: UInt8, access: String, prefix: String?, _ digests: [AttachmentDigest]) throws -> [Bool] {
            try Self.fetch(from: a, admin: admin, seed: seed, access: access, prefix: prefix, digests.map { ($0, 0) }).map {
                if case .message(.channel(1, .attachmentPart))? = $0 { return true }
                return false
            }
        }
        #expect(try fetches(seed: 21, access: "read", prefix: "pub:", [secret, public_]) == [false, true], "a prefix share")
        #expect(try fetches(seed: 22, access: "write", prefix: nil, [secret, public_]) == [false, false], "a write-only share")
        #expect(try fetches(seed: 23, access: "read-write", prefix: nil, [secret, public_]) == [true, true], "a full share")
    }

    /// A new peer with `access` (and `prefix`) to `default` of `a` opens a session and asks for
    /// each content at its offset (1000 bytes); the answer to each (a part, an error), in order.
    static func fetch(
        from a: InProcessReplicationTests.Node, admin: AdminSocketClient, seed: UInt8, access: String, prefix: String?,
        _ requests: [(digest: AttachmentDigest, offset: UInt64)]
    ) throws -> [ConnectionEvent?] {
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: seed, count: DeterministicEntropy.seedBytes))
        let peer = Identity.generate(random: &entropy)
        #expect(try admin.request("peer.add", ["node_id": .string(peer.nodeID.description), "address": .string("-")])["ok"] == .bool(true))
        var share: [String: JSONValue] = ["db": .string("default"), "node_id": .string(peer.nodeID.description), "access": .string(access)]
        if let prefix { share["prefix"] = .string(prefix) }
        #expect(try admin.request("share", share)["ok"] == .bool(true))
        let address = a.agent.queue.sync { a.agent.listening!.address }
        let transport = try connect(
            to: address, as: peer, expecting: try #require(AgentIdentity.nodeID(a.agent.nodeID)), delivery: DispatchQueue(label: "test.peer.delivery"))
        defer { transport.close(.localClosed) }
        let received = ConnectionEventLog()
        transport.start { received.append($0) }
        transport.send(.hello(ConnectionHello(nodeID: [UInt8](repeating: seed, count: 16))))
        #expect(received.next { if case .message(.hello) = $0 { true } else { false } } != nil)
        transport.send(.attach(Attach(channel: 1, database: .default)))
        #expect(received.next { if case .message(.attach) = $0 { true } else { false } } != nil, "default was not opened")
        transport.send(.channel(1, .hello(Hello(features: Hello.attachmentsFeature, databaseID: [UInt8](repeating: seed, count: 16), revsLimit: 1000, window: 4))))
        #expect(received.next { if case .message(.channel(1, .hello)) = $0 { true } else { false } } != nil, "no session hello on the channel")
        return requests.enumerated().map { index, request in
            let id = RequestID(10 + index)
            transport.send(.channel(1, .attachmentGet(AttachmentGet(requestID: id, digest: request.digest.bytes, offset: request.offset, maxBytes: 1000))))
            return received.next(where: {
                if case .message(.channel(1, .error(let e))) = $0 { e.requestID == id } else if case .message(.channel(1, .attachmentPart(let p))) = $0 { p.requestID == id } else { false }
            })
        }
    }

    @Test("content damaged on disk is refused to a peer that resumes its fetch past the damage, and counted as damage of the document naming it; sound content resumes")
    func damagedContentRefusedToAResumedFetch() throws {
        let a = try InProcessReplicationTests.Node(name: "a")
        defer { a.stop() }
        let admin = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60)
        let sound = try Self.attach([UInt8]((0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) }), as: "sound", in: a.agent.store)
        let bytes = [UInt8]((0..<3000).map { UInt8(truncatingIfNeeded: $0) })
        let damaged = try Self.attach(bytes, as: "photo", in: a.agent.store)
        var flipped = bytes
        flipped[100] ^= 0x08  // in the part the peer already has
        let path = a.agent.store.attachments.directory + "/" + damaged.hex
        try FileManager.default.removeItem(atPath: path)
        try Data(flipped).write(to: URL(fileURLWithPath: path))

        let answers = try Self.fetch(from: a, admin: admin, seed: 31, access: "read", prefix: nil, [(damaged, 2000), (sound, 2000)])
        guard case .message(.channel(1, .error(let refusal)))? = answers[0] else {
            Issue.record("the last part of damaged content was sent: \(String(describing: answers[0]))")
            return
        }
        #expect(refusal.code == .storageFailure && refusal.message.contains("damaged"), "\(refusal)")
        guard case .message(.channel(1, .attachmentPart(let part)))? = answers[1] else {
            Issue.record("sound content did not resume: \(String(describing: answers[1]))")
            return
        }
        #expect(part.data.count == 1000 && part.length == 3000)
        // Reported before the refusal was sent, so the status asked for after it counts it.
        let status = try admin.request("status")
        #expect(status["damaged"] == .int(1) && status["last_damage"]?.objectValue?["doc"] == .string("photo"), "\(status)")
    }

    @Test("a node of the previous version reads the agent's connection hello as its own hello and gets a close saying it must be upgraded; the agent's status for it says the same")
    func previousVersionPeerIsToldToUpgrade() throws {
        let a = try InProcessReplicationTests.Node(name: "a")
        defer { a.stop() }
        var entropy = DeterministicEntropy(seed: [UInt8](repeating: 5, count: DeterministicEntropy.seedBytes))
        let old = Identity.generate(random: &entropy)
        let errors = ConnectionEventLog()
        let observation = a.agent.observeReplicationStatus(peer: old.nodeID.description) { status in
            if let error = status.lastError { errors.append(.closed(.failed(error))) }
        }
        defer { observation?.cancel() }
        let admin = try AdminSocketClient(path: a.socket, receiveTimeoutSeconds: 60)
        #expect(try admin.request("peer.add", ["node_id": .string(old.nodeID.description), "address": .string("-")])["ok"] == .bool(true))

        let address = a.agent.queue.sync { a.agent.listening!.address }
        let transport = try Self.connect(
            to: address, as: old, expecting: try #require(AgentIdentity.nodeID(a.agent.nodeID)), delivery: DispatchQueue(label: "test.old.delivery"))
        let received = ConnectionEventLog()
        transport.start { received.append($0) }
        // What a node of the previous version sends first: its database's session hello.
        transport.send(.hello(ConnectionHello(hello: Hello(version: 1, databaseID: [UInt8](repeating: 3, count: 16), revsLimit: 1000, window: 8))))
        guard case .message(.hello(let hello))? = received.next(where: { if case .message(.hello) = $0 { true } else { false } }) else {
            Issue.record("the agent sent no hello")
            return
        }
        #expect(throws: Never.self, "version 1's decoder accepts the agent's connection hello") {
            guard case .hello(let asVersionOne) = try Message.decode(ConnectionMessage.hello(hello).encoded()) else {
                Issue.record("not a hello to version 1")
                return
            }
            #expect(asVersionOne.version == 2)
        }
        guard case .message(.close(let close))? = received.next(where: { if case .message(.close) = $0 { true } else { false } }) else {
            Issue.record("the agent did not close the connection")
            return
        }
        #expect(close.code == .unsupportedVersion && close.reason.hasSuffix("the peer must be upgraded"), "\(close)")
        guard case .closed(.failed(let lastError))? = errors.next(where: {
            if case .closed(.failed(let text)) = $0 { text.contains("must be upgraded") } else { false }
        }) else {
            Issue.record("the agent's status for the peer never said why")
            return
        }
        #expect(lastError.contains("speaks version 1"), "\(lastError)")
    }
}
