import CanopyTestSupport
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The agent's files on disk, as an operator backs them up or moves them: modes and what a clean
/// stop leaves.
@Suite("the agent's data files, with real processes", .serialized)
struct DataFilesEndToEndTests {
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o777
    }

    @Test("the database and its write-ahead log and index are mode 0600, and a file made wider is narrowed at start")
    func databaseFilesArePrivate() throws {
        let agent = try AgentProcess()
        try agent.start()
        try agent.put("a", ["n": .int(1)])
        for path in [agent.dataDir + "/canopy.sqlite", agent.dataDir + "/canopy.sqlite-wal", agent.dataDir + "/canopy.sqlite-shm"] {
            #expect(Self.mode(path) == 0o600, "\(path)")
        }
        _ = try agent.ctl(["shutdown"])
        try waitForExit(agent.process)
        chmod(agent.dataDir + "/canopy.sqlite", 0o644)
        try agent.restart()
        #expect(Self.mode(agent.dataDir + "/canopy.sqlite") == 0o600)
    }

    @Test("a clean stop leaves every transaction in canopy.sqlite: a copy of that file alone holds them all")
    func cleanStopEmptiesTheLog() throws {
        let agent = try AgentProcess()
        try agent.start()
        var docs: [JSONValue] = []
        for index in 0..<300 { docs.append(.object(["_id": .string("doc-\(index)"), "n": .int(Int64(index))])) }
        let written = try agent.client().request("bulk_docs", ["docs": .array(docs)])
        #expect(written["written"] == .int(300))
        try agent.put("last", ["n": .int(300)])
        let stopped = try agent.ctl(["shutdown"])
        #expect(stopped.status == 0, "\(stopped.stderr)")
        try waitForExit(agent.process)
        let wal = agent.dataDir + "/canopy.sqlite-wal"
        let walBytes = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0
        #expect(walBytes == 0, "the write-ahead log still holds \(walBytes) bytes")
        // The database file alone, as a backup that forgot the log would have it.
        let copy = TemporaryDirectory()
        try FileManager.default.copyItem(atPath: agent.dataDir + "/canopy.sqlite", toPath: copy.path + "/canopy.sqlite")
        let store = try DocumentStore(path: copy.path + "/canopy.sqlite")
        #expect(try store.documentCount == 301)
        #expect(try store.get(id: "last").body == .object(["n": .int(300)]))
    }

    @Test("canopyctl compact leaves the write-ahead log empty, not holding a copy of the rebuilt database until a restart")
    func compactTruncatesTheLog() throws {
        let agent = try AgentProcess()
        try agent.start()
        let padding = String(repeating: "x", count: 1000)
        let client = try agent.client()
        for batch in 0..<4 {
            let docs = (0..<1000).map { index in JSONValue.object(["_id": .string("doc-\(batch)-\(index)"), "s": .string(padding)]) }
            #expect(try client.request("bulk_docs", ["docs": .array(docs)])["written"] == .int(1000))
        }
        let compacted = try agent.ctl(["compact"])
        #expect(compacted.status == 0, "\(compacted)")
        let size = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
        let database = size(agent.dataDir + "/canopy.sqlite")
        let wal = size(agent.dataDir + "/canopy.sqlite-wal")
        #expect(database > 4_000_000, "the database holds \(database) bytes")
        #expect(wal < 64 << 10, "the write-ahead log holds \(wal) bytes beside a database of \(database)")
    }

    @Test("a backup cut short by kill -9 while it copies attachment content is refused by canopyd run and by canopyd init, each saying why; a finished backup holds no marker and initialises")
    func interruptedBackupIsNotRestored() throws {
        let agent = try AgentProcess()
        try agent.start()
        // 256 MiB of content: its copy into the backup lasts long enough to be caught in the middle.
        let file = agent.temporary.path + "/big.bin"
        FileManager.default.createFile(atPath: file, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        let part = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        for index in 0..<256 { handle.write(part + Data([UInt8(truncatingIfNeeded: index)])) }
        try handle.close()
        #expect(try agent.ctl(["attach", "big", "blob", "--file", file]).status == 0)

        let backup = agent.temporary.path + "/backup"
        let backingUp = ChildProcess()
        backingUp.executableURL = URL(fileURLWithPath: Binaries.canopyctl)
        backingUp.arguments = ["--data-dir", agent.dataDir, "backup", backup]
        backingUp.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        backingUp.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try backingUp.run()
        try poll("the backup to be copying the attachment content") {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: backup + "/attachments")) ?? []
            return names.contains { $0.hasPrefix("incoming-") }
        }
        agent.signal(SIGKILL)
        try waitForExit(agent.process)
        try waitForExit(backingUp)
        #expect(FileManager.default.fileExists(atPath: backup + "/canopy.sqlite"))
        #expect(FileManager.default.fileExists(atPath: backup + "/backup-unfinished"))

        let run = try Binaries.run(["run", "--data-dir", backup])
        #expect(run.status == 1 && run.stderr.contains("is a backup that was not finished"), "\(run)")
        let initialised = try Binaries.run(["init", "--data-dir", backup])
        #expect(initialised.status == 1 && initialised.stderr.contains("is a backup that was not finished"), "\(initialised)")
        #expect(!FileManager.default.fileExists(atPath: backup + "/identity.key"), "init made an identity for it")

        try agent.restart()
        let finished = agent.temporary.path + "/finished"
        let done = try agent.ctl(["backup", finished])
        #expect(done.status == 0, "\(done)")
        #expect(!FileManager.default.fileExists(atPath: finished + "/backup-unfinished"))
        let restored = try Binaries.run(["init", "--data-dir", finished])
        #expect(restored.status == 0, "\(restored)")
    }

    @Test("an identity.key with one digit changed is refused with a message naming the file, not adopted as another node")
    func damagedIdentityRefused() throws {
        let agent = try AgentProcess()
        let path = agent.dataDir + "/identity.key"
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let digit = "canopy-identity-v2 ".utf8.count + 10
        bytes[digit] = bytes[digit] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        let id = try run(Binaries.canopyd, ["id", "--data-dir", agent.dataDir])
        #expect(id.status == 1)
        #expect(id.stderr.contains("identity.key") && id.stderr.contains("damaged"), "\(id.stderr)")
        let started = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(started.status == 1)
        #expect(started.stderr.contains("damaged"), "\(started.stderr)")
    }

    @Test("canopyctl backup during replication restores as the same node, which catches up from its peer")
    func backupRestoreConverge() throws {
        let (a, b) = try AgentProcess.peeredPair()
        var docs: [JSONValue] = []
        for index in 0..<500 { docs.append(.object(["_id": .string("early-\(index)"), "n": .int(Int64(index))])) }
        _ = try b.client().request("bulk_docs", ["docs": .array(docs)])
        // The backup is taken while b's documents are still arriving on a.
        let backup = a.temporary.path + "/backup"
        let result = try a.ctl(["backup", backup, "--with-identity"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("backed up"), "\(result.stdout)")
        #expect(Self.mode(backup) == 0o700 && Self.mode(backup + "/canopy.sqlite") == 0o600 && Self.mode(backup + "/identity.key") == 0o600)
        try poll("a to hold b's documents") { try a.documentCount() == 500 }
        for index in 0..<50 { try b.put("late-\(index)", ["n": .int(Int64(index))]) }
        // a is lost; its backup comes back as the same node, on the address b knows.
        let address = try a.listenAddress()
        _ = try a.ctl(["shutdown"])
        try waitForExit(a.process)
        let restored = ChildProcess()
        restored.executableURL = URL(fileURLWithPath: Binaries.canopyd)
        restored.arguments = ["run", "--data-dir", backup, "--listen", address]
        restored.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try restored.run()
        defer { if restored.isRunning { kill(restored.processIdentifier, SIGKILL) } }
        let id = try run(Binaries.canopyd, ["id", "--data-dir", backup])
        #expect(id.stdout.contains(a.nodeID))
        try poll("the restored node to catch up from b") {
            guard let client = try? AdminSocketClient(path: backup + "/admin.sock", receiveTimeoutSeconds: 10),
                case .int(let count)? = try client.request("stats")["doc_count"] else { return false }
            return count == 550
        }
        kill(restored.processIdentifier, SIGTERM)
        try waitForExit(restored)
        #expect(restored.terminationStatus == 0)
        // Backing up into a directory that holds something is refused, naming it.
        let refused = try b.ctl(["backup", backup])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("not an empty directory"), "\(refused.stderr)")
    }

    @Test("a backup holds the attachment content its documents name, checked as it is copied; damaged content fails it, naming the digest")
    func backupCarriesAttachments() throws {
        let agent = try AgentProcess()
        try agent.start()
        let file = agent.temporary.path + "/photo.bin"
        let content = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try content.write(to: URL(fileURLWithPath: file))
        #expect(try agent.ctl(["attach", "pic", "photo", "--file", file]).status == 0)
        #expect(try agent.ctl(["db", "create", "archive"]).status == 0)
        let other = agent.temporary.path + "/notes.txt"
        try Data("kept in another database".utf8).write(to: URL(fileURLWithPath: other))
        #expect(try agent.ctl(["attach", "memo", "notes", "--file", other, "--db", "archive"]).status == 0)

        let backup = agent.temporary.path + "/backup"
        let result = try agent.ctl(["backup", backup, "--with-identity"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("and 2 attachment files (0.3 MiB)"), "\(result.stdout)")
        let copied = try FileManager.default.contentsOfDirectory(atPath: backup + "/attachments")
        #expect(copied.count == 2 && copied.allSatisfy { $0.count == 64 }, "\(copied)")

        // The backup restores as a node that serves both files.
        _ = try agent.ctl(["shutdown"])
        try waitForExit(agent.process)
        let restored = ChildProcess()
        restored.executableURL = URL(fileURLWithPath: Binaries.canopyd)
        restored.arguments = ["run", "--data-dir", backup, "--listen", "127.0.0.1:0"]
        restored.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try restored.run()
        defer { if restored.isRunning { kill(restored.processIdentifier, SIGKILL) } }
        try poll("the restored node to answer") { FileManager.default.fileExists(atPath: backup + "/admin.sock") }
        let read = try run(Binaries.canopyctl, ["--data-dir", backup, "attachment", "pic", "photo", "--output", backup + "/read.bin"])
        #expect(read.status == 0, "\(read.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: backup + "/read.bin")) == content)
        let memo = try run(Binaries.canopyctl, ["--data-dir", backup, "attachment", "memo", "notes", "--db", "archive"])
        #expect(memo.stdout == "kept in another database", "\(memo.stderr)")

        // Content damaged on the node is not copied, and the backup says which.
        let damaged = backup + "/attachments/" + copied.sorted().first!
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: damaged)))
        bytes[bytes.count / 2] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let second = agent.temporary.path + "/second"
        let failed = try run(Binaries.canopyctl, ["--data-dir", backup, "backup", second])
        #expect(failed.status == 1, "\(failed.stdout)")
        #expect(failed.stderr.contains("lacks 1 attachment content file that could not be copied: "), "\(failed.stderr)")
        #expect(failed.stderr.contains("blake2b-" + copied.sorted().first! + ": the content stored as"), "\(failed.stderr)")
        #expect(failed.stderr.contains("the file is damaged"), "\(failed.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: second + "/attachments").count == 1)
        kill(restored.processIdentifier, SIGTERM)
        try waitForExit(restored)
    }

    @Test("a damaged database is refused at start with a message naming the file and what to do; canopyctl check says a sound one is sound")
    func damagedDatabaseRefused() throws {
        let agent = try AgentProcess()
        try agent.start()
        var docs: [JSONValue] = []
        for index in 0..<200 {
            docs.append(.object(["_id": .string("doc-\(index)"), "text": .string(String(repeating: "x", count: 1000))]))
        }
        _ = try agent.client().request("bulk_docs", ["docs": .array(docs)])
        let checked = try agent.ctl(["check"])
        #expect(checked.status == 0, "\(checked.stderr)")
        #expect(checked.stdout.contains("the database is sound") && checked.stdout.contains("200 document rows checked"), "\(checked.stdout)")
        _ = try agent.ctl(["shutdown"])
        try waitForExit(agent.process)
        // Bytes flipped inside a page of the table, as a failing disk would leave them.
        let path = agent.dataDir + "/canopy.sqlite"
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(bytes.count > 20 * 4096)
        for offset in (10 * 4096)..<(10 * 4096 + 64) { bytes[offset] ^= 0x5A }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let started = try run(Binaries.canopyd, ["run", "--data-dir", agent.dataDir])
        #expect(started.status == 1)
        #expect(started.stderr.contains("canopy.sqlite is damaged") && started.stderr.contains("backup"), "\(started.stderr)")
    }
}
