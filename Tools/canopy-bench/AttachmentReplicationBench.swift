import ArgumentParser
import CSodium
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyCrypto
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `attachment-replication`: attachment content between two real agents over encrypted loopback
/// TCP, each figure beside a ceiling or target (method: Tools/canopy-bench/README.md,
/// *attachment-replication*):
///
/// 1. One large attachment (1 GiB by default) pulled by an idle agent: MB/s beside the raw
///    secretstream rate of libsodium measured in the same run (one core sealing and opening
///    256 KiB frames: the encryption every byte needs at least), and both agents' peak RSS above
///    their idle peak.
/// 2. The same pull into a third agent killed (SIGKILL) once half the content is on its disk,
///    then restarted: the bytes the source sent in all, as a share of the content.
/// 3. Many documents with an attachment each (10,000 × 100 KiB, all different): documents/s.
/// 4. One content named by many documents (1,000): the bytes the source sent, as a share of the
///    content.
struct AttachmentReplicationBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment-replication",
        abstract: "Attachments between two canopyd: one large one (MB/s beside raw secretstream, RSS), resume after kill -9, many small ones, shared content.")

    @OptionGroup var agents: AgentBenchOptions

    @Option(help: "MiB of the large attachment.")
    var mebibytes = 1024

    @Option(help: "Documents with an attachment each, for the many-documents figure.")
    var documents = 10_000

    @Option(help: "KiB of each of those attachments.")
    var kibibytes = 100

    @Option(help: "Documents naming one shared content.")
    var shared = 1_000

    enum Phase: String, ExpressibleByArgument, CaseIterable { case large, resume, many, shared }

    @Option(parsing: .upToNextOption, help: "Parts to run: large resume many shared.")
    var phases: [Phase] = Phase.allCases

    @Flag(help: "Print the figures as JSON.")
    var json = false

    func run() throws {
        Sodium.ensureInitialized()
        let (base, remove) = agents.temporaryDirectory()
        defer { remove() }
        let canopyd = try agents.canopydPath()
        var figures: [Figure] = []
        if phases.contains(.large) || phases.contains(.resume) { figures += try runLarge(base: base, canopyd: canopyd) }
        if phases.contains(.many) { figures += try runMany(base: base, canopyd: canopyd) }
        if phases.contains(.shared) { figures += try runShared(base: base, canopyd: canopyd) }
        FigureReport.print(figures, json: json)
    }

    /// 1 and 2: the large attachment, from a source loaded in-process before it starts, pulled
    /// once, then pulled again by a receiver killed at half way.
    func runLarge(base: String, canopyd: String) throws -> [Figure] {
        var figures: [Figure] = []
        let mib = { (bytes: Int) in Double(bytes) / Double(1 << 20) }
        let source = try BenchAgent(name: "source", parent: base, canopyd: canopyd)
        let (large, copySeconds) = try Self.loadLarge(source, base: base, mebibytes: mebibytes)
        try source.start()
        defer { source.stop() }
        let address = try source.listenAddress()
        let total = mebibytes << 20
        if phases.contains(.large) {
            let ceiling = WireBench.rawSecretstream(plaintextBytes: 256 << 10, seconds: 2)
            let target = try BenchAgent(name: "large", parent: base, canopyd: canopyd)
            try target.start()
            defer { target.stop() }
            let idleTarget = try target.peakResidentBytes()
            let idleSource = try source.peakResidentBytes()
            let client = try target.client()
            try Self.allow(target, on: source)
            let seconds = try AttachmentStorageBench.time { try target.pullOnce(from: source, address: address, on: client) }
            try Self.expectContent(target, large, documents: 1)
            figures.append(Figure(
                name: "one \(mebibytes) MiB attachment pulled", value: Double(total) / seconds / 1e6, unit: "MB/s",
                ceiling: ceiling.megabytesPerSecond, ceilingName: "raw secretstream", note: String(format: "%.2f s; target ≥ 50%%", seconds)))
            figures.append(Figure(
                name: "the same pull against a disk copy", value: Double(total) / seconds / 1e6, unit: "MB/s",
                ceiling: Double(total) / copySeconds / 1e6, ceilingName: "disk copy + fsync"))
            figures.append(Figure(
                name: "receiver peak RSS above idle", value: mib(try target.peakResidentBytes() - idleTarget), unit: "MiB", ceiling: 16,
                ceilingName: "target", note: String(format: "idle peak %.1f MiB", mib(idleTarget))))
            figures.append(Figure(
                name: "sender peak RSS above idle", value: mib(try source.peakResidentBytes() - idleSource), unit: "MiB", ceiling: 16,
                ceilingName: "target", note: String(format: "idle peak %.1f MiB", mib(idleSource))))
            target.stop()
        }

        // 2. Killed at half way, restarted.
        guard phases.contains(.resume) else { return figures }
        let resumed = try BenchAgent(name: "resumed", parent: base, canopyd: canopyd)
        try resumed.start()
        defer { resumed.stop() }
        try Self.allow(resumed, on: source)
        let sentBefore = try source.peerBytes().sent
        try resumed.call(Admin.AddPeer(.init(nodeID: source.nodeID, address: address, direction: .pull, mode: .continuous)))
        let partial = resumed.dataDir + "/attachments/partial-" + large.hex
        try Self.waitUntil("half the content on the receiver's disk") { Self.size(of: partial) >= Int64(total / 2) }
        resumed.killHard()
        let kept = Self.size(of: partial)
        try resumed.restart()
        try Self.waitUntil("the content complete after the restart") {
            (try? resumed.documentCount(resumed.client())) == 1
                && (try? resumed.call(Admin.Stats()))?.counts.awaitingAttachments == 0
        }
        try Self.expectContent(resumed, large, documents: 1)
        let sent = try source.peerBytes().sent - sentBefore
        figures.append(Figure(
            name: "bytes sent for a pull killed at \(kept * 100 / Int64(total))% and resumed", value: Double(sent) / Double(total) * 100,
            unit: "% of content", ceiling: 110, ceilingName: "target", note: String(format: "%.1f MiB kept across the kill", mib(Int(kept)))))
        resumed.stop()
        source.stop()
        return figures
    }

    /// 3. Many documents with an attachment each.
    func runMany(base: String, canopyd: String) throws -> [Figure] {
        let manySource = try BenchAgent(name: "many-source", parent: base, canopyd: canopyd)
        try Self.loadMany(manySource, documents: documents, kibibytes: kibibytes)
        try manySource.start()
        defer { manySource.stop() }
        let many = try BenchAgent(name: "many", parent: base, canopyd: canopyd)
        try many.start()
        defer { many.stop() }
        let manyClient = try many.client()
        try Self.allow(many, on: manySource)
        let manySeconds = try AttachmentStorageBench.time {
            try many.pullOnce(from: manySource, address: try manySource.listenAddress(), on: manyClient)
        }
        guard try many.documentCount(manyClient) == documents else { throw ValidationError("the many-documents pull is incomplete") }
        let filesSeconds = try Self.writeFiles(in: many.dataDir + "/ceiling-files", count: documents, kibibytes: kibibytes)
        let figure = Figure(
            name: "\(documents) documents × \(kibibytes) KiB attachment pulled", value: Double(documents) / manySeconds, unit: "docs/s",
            ceiling: Double(documents) / filesSeconds, ceilingName: "the same files written on the receiver's disk",
            note: String(format: "%.2f s, %.0f MB/s of content; target 2,000 docs/s", manySeconds, Double(documents * kibibytes << 10) / manySeconds / 1e6))
        many.stop()
        manySource.stop()
        return [figure]
    }

    /// The ceiling of the many-documents pull: `count` files of `kibibytes` each written in a new
    /// directory beside the receiver's data by one thread, as the receiver stores content — each
    /// created as a partial file and written, then per 500 one `syncfs`, the renames to their
    /// final names and a sync of the directory — with no network, hashing or database. On this
    /// kind of host it is the file system that moves the figure (creating a file where many were
    /// deleted minutes before costs far more on ext4 without a journal), so the pull is read
    /// against this, measured in the same run on the same disk. Returns the seconds taken.
    static func writeFiles(in directory: String, count: Int, kibibytes: Int) throws -> Double {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        guard let syncfs = AttachmentStore.syncFileSystem else { throw ValidationError("no syncfs") }
        var content = [UInt8](repeating: 0, count: kibibytes << 10)
        randombytes_buf(&content, content.count)
        return try AttachmentStorageBench.time {
            let handle = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard handle >= 0 else { throw ValidationError("cannot open \(directory)") }
            defer { close(handle) }
            for start in stride(from: 0, to: count, by: 500) {
                let names = (start..<min(start + 500, count)).map { String(format: "%064x", $0) }
                for (offset, name) in names.enumerated() {
                    // Each file's content differs, as each attachment's does.
                    content.withUnsafeMutableBytes { $0.storeBytes(of: UInt64(start + offset), as: UInt64.self) }
                    let file = open(directory + "/partial-" + name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                    guard file >= 0, content.withUnsafeBytes({ write(file, $0.baseAddress, $0.count) }) == content.count else {
                        throw ValidationError("writing \(directory)/partial-\(name) failed")
                    }
                    close(file)
                }
                guard syncfs(handle) == 0 else { throw ValidationError("syncfs failed") }
                for name in names where rename(directory + "/partial-" + name, directory + "/" + name) != 0 {
                    throw ValidationError("rename in \(directory) failed")
                }
                guard fsync(handle) == 0 else { throw ValidationError("fsync of \(directory) failed") }
            }
        }
    }

    /// 4. One content named by many documents.
    func runShared(base: String, canopyd: String) throws -> [Figure] {
        let sharedSource = try BenchAgent(name: "shared-source", parent: base, canopyd: canopyd)
        try Self.loadShared(sharedSource, documents: shared)
        try sharedSource.start()
        defer { sharedSource.stop() }
        let sharing = try BenchAgent(name: "shared", parent: base, canopyd: canopyd)
        try sharing.start()
        defer { sharing.stop() }
        try Self.allow(sharing, on: sharedSource)
        try sharing.pullOnce(from: sharedSource, address: try sharedSource.listenAddress(), on: try sharing.client())
        let sharedSent = try sharedSource.peerBytes().sent
        let files = try FileManager.default.contentsOfDirectory(atPath: sharing.dataDir + "/attachments").filter { $0.count == 64 }
        guard files.count == 1, try sharing.documentCount(try sharing.client()) == shared else {
            throw ValidationError("the shared content is stored \(files.count) times")
        }
        return [Figure(
            name: "bytes sent for 1 MiB named by \(shared) documents", value: Double(sharedSent) / Double(1 << 20) * 100,
            unit: "% of content", ceiling: nil, ceilingName: nil, note: "the whole connection, revisions included; stored once")]
    }

    /// The store of `agent`, for loading before it starts.
    static func store(_ agent: BenchAgent) throws -> DocumentStore {
        try DocumentStore(path: agent.databasePath, configuration: .init(attachmentsDirectory: agent.dataDir + "/attachments"))
    }

    /// Document `large` with one `mebibytes` attachment of random bytes; returns its digest, and
    /// the seconds a file-to-file copy of the same bytes took (read, write, `fsync`: what a
    /// receiver has to do at least on this disk).
    static func loadLarge(_ agent: BenchAgent, base: String, mebibytes: Int) throws -> (AttachmentDigest, Double) {
        let store = try store(agent)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        randombytes_buf(&block, block.count)
        let file = base + "/large.bin"
        try AttachmentStorageBench.writeFile(file, block, repeated: mebibytes, hashing: false)
        let copy = try AttachmentStorageBench.time { try AttachmentAdminBench.copy(file, to: base + "/copy.bin") }
        try FileManager.default.removeItem(atPath: base + "/copy.bin")
        let large = try store.attachments.add(contentsOf: file)
        try FileManager.default.removeItem(atPath: file)
        try store.put(id: "large", body: Self.naming(large.digest, large.length), replacing: nil)
        return (large.digest, copy)
    }

    /// Documents `doc-N`, each with a different attachment of `kibibytes` random bytes.
    static func loadMany(_ agent: BenchAgent, documents: Int, kibibytes: Int) throws {
        let store = try store(agent)
        var writes: [LocalWrite] = []
        var content = [UInt8](repeating: 0, count: kibibytes << 10)
        for index in 0..<documents {
            randombytes_buf(&content, content.count)
            let stored = try Self.add(content, to: store)
            writes.append(LocalWrite(documentID: "doc-\(index)", body: Self.naming(stored.digest, stored.length), replacing: nil))
            if writes.count == 1000 || index == documents - 1 {
                _ = try store.putBatch(writes)
                writes = []
            }
        }
    }

    /// Documents `shared-N`, all naming one content of 1 MiB.
    static func loadShared(_ agent: BenchAgent, documents: Int) throws {
        let store = try store(agent)
        var content = [UInt8](repeating: 0, count: 1 << 20)
        randombytes_buf(&content, content.count)
        let stored = try Self.add(content, to: store)
        _ = try store.putBatch((0..<documents).map { LocalWrite(documentID: "shared-\($0)", body: Self.naming(stored.digest, stored.length), replacing: nil) })
    }

    static func add(_ content: [UInt8], to store: DocumentStore) throws -> (digest: AttachmentDigest, length: Int64) {
        let upload = try store.attachments.beginUpload(length: Int64(content.count), from: "the benchmark")
        try content.withUnsafeBytes { try upload.write($0) }
        return try upload.finish()
    }

    static func naming(_ digest: AttachmentDigest, _ length: Int64) -> JSONValue {
        Attachments.body(.object([:]), with: ["content": AttachmentMetadata(contentType: "application/octet-stream", length: length, digest: digest, revpos: 1)])
    }

    /// Checks the agent holds `documents` documents and the content `digest`, whole.
    static func expectContent(_ agent: BenchAgent, _ digest: AttachmentDigest, documents: Int) throws {
        guard try agent.documentCount(try agent.client()) == documents else { throw ValidationError("\(agent.name) lacks documents") }
        let path = agent.dataDir + "/attachments/" + digest.hex
        guard AttachmentDigest.prefix + (try AttachmentStorageBench.readFile(path, hashing: true)) == digest.description else {
            throw ValidationError("\(agent.name)'s copy of \(digest) does not match it")
        }
    }

    static func size(of path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    /// Lets `target` pull from `source` (the source accepts it and pushes to it).
    static func allow(_ target: BenchAgent, on source: BenchAgent) throws {
        try source.call(Admin.AddPeer(.init(nodeID: target.nodeID, direction: .push, mode: .continuous)))
    }

    /// Polls `condition` every millisecond for up to ten minutes.
    static func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(600)
        while Date() < deadline {
            if try condition() { return }
            usleep(1_000)
        }
        throw ValidationError("timed out waiting for \(what)")
    }
}
