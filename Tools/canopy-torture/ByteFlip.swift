import ArgumentParser
import CanopyAdmin
import CanopyCore
import Foundation

/// `byteflip`: an agent's cleanly stopped database, copied, with seeded-random bytes flipped in
/// the copy; an agent started on the copy must refuse it or serve nothing damaged: a fresh peer C
/// that pulls from it must end up with only documents the original held, exactly.
struct ByteFlip: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "byteflip", abstract: "Flip bytes in a copy of canopy.sqlite; count damaged documents that reach a peer.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Trials, each on a new copy (default 30; 3 with --quick).") var trials: Int?
    @Option(help: "Bytes flipped per trial.") var flips = 8
    @Option(help: "Documents in the original database.") var documents = 400
    @Option(
        help: "Number of the first trial (each trial's flips depend only on --seed and its number, so one can be rerun alone).")
    var firstTrial = 1

    func validate() throws {
        if let trials, !(1...100_000).contains(trials) { throw ValidationError("--trials must be 1…100000") }
        guard (1...1_000_000).contains(flips) else { throw ValidationError("--flips must be 1…1000000") }
        guard (1...100_000).contains(documents) else { throw ValidationError("--documents must be 1…100000") }
        guard (1...1_000_000).contains(firstTrial) else { throw ValidationError("--first-trial must be 1…1000000") }
    }

    /// What one trial found.
    struct Trial {
        var refused = false
        var refusalNamesFile = false
        var crashed = false
        /// C ended up with exactly the original's leaves.
        var intact = false
        /// C or `check` showed that the copy was damaged.
        var damageShown = false
        var reported = false
        var checkFoundDamage = false
        var propagated = 0
        var missing = 0
        var note: String?
    }

    func experiment() throws -> ExperimentResult {
        let count = trials ?? (common.quick ? 3 : 30)
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-flip")
        let original = try TortureAgent(
            name: "original", dataDir: directory + "/original", logDirectory: directory, binaries: binaries)
        try original.startServing()
        try fill(original)
        let originalLeaves = Set(try Documents.leaves(original).map(Documents.fingerprint))
        guard original.stop() == 0 else {
            throw ExperimentFailure("the original agent did not stop cleanly: \(original.logTail())")
        }
        common.progress(
            "original: \(originalLeaves.count) leaves of \(documents) documents; \(count) trials of \(flips) flipped bytes")

        var results: [Trial] = []
        for index in (firstTrial - 1)..<(firstTrial - 1 + count) {
            let trialDirectory = directory + "/trial-\(index + 1)"
            try FileManager.default.createDirectory(atPath: trialDirectory, withIntermediateDirectories: true)
            let trial = try runTrial(
                index, original: original, originalLeaves: originalLeaves, directory: trialDirectory, binaries: binaries)
            common.progress("trial \(index + 1) (\(index + 2 - firstTrial)/\(count)): " + describe(trial))
            results.append(trial)
            if !common.keep { try? FileManager.default.removeItem(atPath: trialDirectory) }
        }

        var result = ExperimentResult(
            name: "byteflip", summary: "\(count) copies of a \(documents)-document database with \(flips) random bytes flipped")
        let started = results.filter { !$0.refused }
        result.figures = [
            .count("trials", "trials", count),
            .count("refused_at_start", "refused at start", results.filter(\.refused).count),
            .count(
                "refusals_naming_file", "refusals naming canopy.sqlite", results.filter(\.refusalNamesFile).count,
                target: .equal(Double(results.filter(\.refused).count))),
            .count("started", "started", started.count),
            .count("started_intact", "started, peer got exactly the original", started.filter(\.intact).count),
            .count("started_damage_shown", "started, damage shown (peer or check)", started.filter(\.damageShown).count),
            .count("reported", "started, damage reported by the agent", started.filter(\.reported).count),
            .count("check_found_damage", "started, canopyctl check not sound", started.filter(\.checkFoundDamage).count),
            .count("crashed", "started, then exited during replication", started.filter(\.crashed).count),
            .count("documents_missing", "original leaves missing on the peer (all trials)", started.map(\.missing).reduce(0, +)),
            .count(
                "damaged_propagated", "damaged documents propagated", results.map(\.propagated).reduce(0, +), target: .equal(0)),
        ]
        result.notes = results.enumerated().compactMap { index, trial in trial.note.map { "trial \(firstTrial + index): \($0)" } }
        return result
    }

    private func describe(_ trial: Trial) -> String {
        if trial.refused {
            return "refused at start" + (trial.refusalNamesFile ? " (names the file)" : " (WITHOUT naming the file)")
        }
        var words = [trial.intact ? "started, peer got the original" : "started, peer differs"]
        if trial.reported { words.append("reported") }
        if trial.checkFoundDamage { words.append("check not sound") }
        if trial.crashed { words.append("crashed") }
        if trial.propagated > 0 { words.append("\(trial.propagated) damaged documents PROPAGATED") }
        return words.joined(separator: ", ")
    }

    /// `documents` documents of varied size, a fifth of them updated and a twentieth deleted.
    private func fill(_ agent: TortureAgent) throws {
        var random = SplitMix64(seed: common.seed)
        let docs = (0..<documents).map { index -> JSONValue in
            .object([
                "_id": .string(String(format: "doc-%06d", index)), "n": .int(Int64(index)),
                "text": .string(String(repeating: "lorem ipsum ", count: 1 + Int(random.next(below: 60)))),
            ])
        }
        for start in stride(from: 0, to: docs.count, by: 1000) {
            try agent.call(Admin.BulkDocuments(docs: Array(docs[start..<min(start + 1000, docs.count)])))
        }
        let client = try agent.client()
        for index in stride(from: 0, to: documents, by: 5) {
            let doc = String(format: "doc-%06d", index)
            guard case .success(let got) = try client.call(Admin.GetDocument(doc: doc)), let rev = got.reply.revision else { continue }
            let answer = try client.call(Admin.PutDocument(doc: doc, body: .object(["n": .int(Int64(index)), "edited": .bool(true)]), rev: rev))
            if index % 20 == 0, case .success(let put) = answer, let edited = put.reply.rev {
                _ = try client.call(Admin.DeleteDocument(doc: doc, rev: edited))
            }
        }
    }

    private func runTrial(
        _ index: Int, original: TortureAgent, originalLeaves: Set<String>, directory: String, binaries: Binaries
    ) throws -> Trial {
        var trial = Trial()
        let copyDir = directory + "/copy"
        try FileManager.default.createDirectory(
            atPath: copyDir, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        for file in ["identity.key", "canopy.conf", "canopy.sqlite"] {
            try FileManager.default.copyItem(atPath: original.dataDir + "/" + file, toPath: copyDir + "/" + file)
        }
        let c = try TortureAgent(name: "c", dataDir: directory + "/c", logDirectory: directory, binaries: binaries)
        let copy = try TortureAgent(name: "copy", existing: copyDir, logDirectory: directory, binaries: binaries)
        defer {
            copy.stop()
            c.stop()
        }
        // The copy lets C pull (only) without dialling it; C is allowed before the copy starts.
        let section = "\n[peer \(c.nodeID)]\naddress = -\ndirection = push\nmode = continuous\n"
        let config = try FileHandle(forWritingTo: URL(fileURLWithPath: copyDir + "/canopy.conf"))
        config.seekToEndOfFile()
        config.write(Data(section.utf8))
        try config.close()
        let flipped = try flip(copy.databasePath, trial: index)

        if case .exited(let status) = try copy.start() {
            trial.refused = true
            trial.refusalNamesFile = copy.log.contains("canopy.sqlite")
            if !trial.refusalNamesFile {
                trial.note = "refused (exit \(status)) without naming the file: \(copy.logTail(1).prefix(160))"
            }
            return trial
        }
        try c.startServing()
        try c.allow(copy, direction: .pull, mode: .once)
        let sync = try c.ctl(["sync", copy.nodeID, "--wait", "--timeout", "60"], limit: 90)
        trial.crashed = !copy.isRunning
        let onC = try Documents.leaves(c).map(Documents.fingerprint)
        trial.propagated = onC.filter { !originalLeaves.contains($0) }.count
        trial.missing = originalLeaves.subtracting(onC).count
        trial.intact = trial.propagated == 0 && trial.missing == 0 && sync.status == 0
        if !trial.crashed {
            trial.reported = try reported(copy)
            trial.checkFoundDamage = !(try copy.checkSound())
        } else {
            trial.reported = Self.mentionsDamage(copy.log)
        }
        trial.damageShown = !trial.intact || trial.checkFoundDamage
        if trial.propagated > 0 {
            let example = onC.first { !originalLeaves.contains($0) } ?? ""
            trial.note = "flips at \(flipped); propagated e.g. \(example.prefix(200))"
        } else if trial.damageShown && !trial.reported {
            trial.note = "damage not reported by the agent (sync exit \(sync.status): \(sync.stderr.prefix(160)))"
        }
        return trial
    }

    /// Flips `flips` seeded-random bytes of the file (each XORed with a nonzero byte); returns the offsets.
    private func flip(_ path: String, trial: Int) throws -> [Int] {
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        var random = SplitMix64(seed: common.seed &+ 0x9E37_79B9 &* UInt64(trial + 1))
        var offsets: [Int] = []
        for _ in 0..<flips {
            let offset = random.index(below: bytes.count)
            bytes[offset] ^= UInt8(1 + random.next(below: 255))
            offsets.append(offset)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return offsets.sorted()
    }

    /// The agent said its file is damaged: a damage count in `status`, an event about damage, or a
    /// log line saying so.
    private func reported(_ agent: TortureAgent) throws -> Bool {
        if case .success(let status) = try agent.client(timeout: 30).call(Admin.Status()), status.reply.damaged > 0 { return true }
        return try Self.eventTypes(agent).contains { $0.contains("damage") || $0.contains("corrupt") }
            || Self.mentionsDamage(agent.log)
    }

    static func mentionsDamage(_ text: String) -> Bool {
        let lower = text.lowercased()
        return ["damage", "corrupt", "malformed"].contains { lower.contains($0) }
    }

    /// The types of every event the agent still holds.
    static func eventTypes(_ agent: TortureAgent) throws -> [String] {
        let client = try agent.client(timeout: 10)
        guard case .success(let subscribed) = try client.call(Admin.Subscribe(since: 0)) else { return [] }
        var types: [String] = []
        var seq: Int64 = 0
        while seq < subscribed.reply.lastSeq {
            guard case .event(let event) = try AdminLine.read(try client.readLine()) else { continue }
            seq = event.seq
            types.append(event.type)
        }
        return types
    }
}
