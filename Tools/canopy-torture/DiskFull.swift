import ArgumentParser
import CanopyAdmin
import CanopyCore
import Foundation

/// `disk-full`: agent A's data directory on a small tmpfs; B writes more than fits and A pulls it
/// until its disk is full. A must keep serving reads and show the failure; once the tmpfs is made
/// larger, A must catch up with nothing acknowledged lost. Skipped (status 0) where a tmpfs cannot
/// be mounted (not root, or in a container without the capability).
struct DiskFull: Experiment {
    static let configuration = CommandConfiguration(
        commandName: "disk-full",
        abstract: "Fill A's disk by replication; check reads, visibility, and catch-up after space returns.")

    @OptionGroup var common: CommonOptions
    @Option(help: "Size of A's tmpfs in MiB (default 8; 4 with --quick).") var sizeMib: Int?
    @Option(help: "Documents of about 1 KiB that B writes (default 3 × the tmpfs size in KiB).") var documents: Int?
    @Option(help: "Seconds A stays full after the reads, its log watched (default 6).") var fullSeconds = 6.0
    @Option(help: "Target: A's log lines from the failure shown until space returns.") var fullLogLinesTarget = 3

    func validate() throws {
        if let sizeMib, !(2...4096).contains(sizeMib) { throw ValidationError("--size-mib must be 2…4096") }
        if let documents, !(1...10_000_000).contains(documents) { throw ValidationError("--documents must be 1…10000000") }
    }

    static let ownDocuments = 200

    func experiment() throws -> ExperimentResult {
        let size = sizeMib ?? (common.quick ? 4 : 8)
        let count = documents ?? size * 1024 * 3
        let binaries = try common.binaries()
        let directory = try makeTemporaryDirectory("canopy-full")
        let point = directory + "/tmpfs"
        try FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: false)
        let mounted = try mount(["-t", "tmpfs", "-o", "size=\(size)m,mode=0700", "tmpfs", point])
        guard mounted.status == 0 else {
            let reason = (mounted.stderr + mounted.stdout).split(whereSeparator: \.isWhitespace).joined(separator: " ")
            return .skip("disk-full", "cannot mount a tmpfs (\(reason.isEmpty ? "mount exited \(mounted.status)" : reason))")
        }
        Cleanup.shared.add(mount: point)
        defer {
            _ = try? mount(["-l", point], command: "umount")
            Cleanup.shared.remove(mount: point)
        }
        let (a, b) = try TortureAgent.replicatingPair(in: directory, aDataDir: point + "/a", binaries: binaries)
        defer {
            b.stop()
            a.stop()
        }

        var acknowledged: [String: String] = [:]
        try write(a, prefix: "a", count: Self.ownDocuments, into: &acknowledged)
        common.progress("b writes \(count) documents of about 1 KiB; a's disk is \(size) MiB")
        try write(b, prefix: "b", count: count, into: &acknowledged)

        // Full: a shows a failure, or its count stops moving short of b's.
        var lastCount = -1
        var stillSince = now()
        let filled = waitUntil(limit: 300, interval: 0.1) {
            let held = a.documentCount()
            if held != lastCount {
                lastCount = held
                stillSince = now()
            }
            if held >= count + Self.ownDocuments { return true }
            return Self.failureShown(a, peer: b) != nil || now() - stillSince > 5
        }
        let heldWhenFull = a.documentCount()
        let linesWhenFull = a.logLineCount
        let diskFilled = filled && heldWhenFull < count + Self.ownDocuments
        let shown = Self.failureShown(a, peer: b)
        common.progress("a holds \(heldWhenFull) of \(count + Self.ownDocuments) documents; failure shown: \(shown ?? "nowhere")")

        // Reads while full: get of one of a's own documents, and status, alternately.
        var served = 0
        var probes = 0
        let sample = acknowledged.keys.sorted().first { $0.hasPrefix("a-") } ?? "a-000000"
        for index in 0..<20 {
            probes += 1
            let result = try a.ctl(index % 2 == 0 ? ["get", sample] : ["status"], limit: 30)
            if result.status == 0 { served += 1 }
            pause(0.05)
        }
        let writeWhileFull = try a.ctl(["put", "written-while-full", "--body", "{\"n\":1}"], limit: 30)
        if writeWhileFull.status == 0,
            case .string(let rev)? =
                (try? JSONValue.parse(
                    try a.ctl(["get", "written-while-full"]).stdout))?.objectValue?["_rev"]
        {
            acknowledged["written-while-full"] = rev
        }
        // Full for a while longer: a redials b on its store-failure backoff and logs the
        // condition once per interval, not a warning per redial.
        pause(fullSeconds)
        let linesWhileFull = a.logLineCount - linesWhenFull
        let survived = a.isRunning

        common.progress("space returns: the tmpfs grows to \(size * 64) MiB")
        let grown = try mount(["-o", "remount,size=\(size * 64)m", point])
        guard grown.status == 0 else { throw ExperimentFailure("remount failed: \(grown.stderr)") }
        let freed = now()
        if !a.isRunning { try a.startServing() }
        let caughtUp = try waitUntil(limit: 300, interval: 0.05) {
            let onA = try Documents.currentRevisions(a)
            guard acknowledged.allSatisfy({ onA[$0.key] == $0.value }) else { return false }
            return try Documents.currentRevisions(b) == onA
        }
        let catchUp = now() - freed
        let lost =
            try [a, b].map { agent in
                let held = try Documents.currentRevisions(agent)
                return acknowledged.filter { held[$0.key] != $0.value }.count
            }.max() ?? 0
        let sound = try a.checkSound()

        var result = ExperimentResult(
            name: "disk-full", summary: "a's data directory on a \(size) MiB tmpfs; b wrote \(count) documents for a to pull")
        result.figures = [
            .count("writes_acknowledged", "writes acknowledged (a and b)", acknowledged.count),
            .flag("disk_filled", "a's disk filled before it held them all", diskFilled, required: true),
            .count("held_when_full", "documents a held when full", heldWhenFull),
            .flag("failure_visible", "failure visible (peer table or log)", shown != nil, required: true),
            .flag("survived", "a kept running while full", survived, required: true),
            .count("reads_served_while_full", "reads served while full (get, status)", served, target: .equal(Double(probes))),
            .count("write_while_full_exit", "exit status of a put while full", Int(writeWhileFull.status)),
            .count(
                "log_lines_while_full", "a's log lines from the failure shown until space returned", linesWhileFull,
                target: .atMost(Double(fullLogLinesTarget))),
            .flag("caught_up", "a caught up once space returned", caughtUp, required: true),
            .seconds("catch_up_seconds", "catch-up after space returned", catchUp),
            .count("lost_acknowledged_writes", "lost acknowledged writes", lost, target: .equal(0)),
            .flag("integrity_sound", "integrity (check sound on a)", sound, required: true),
        ]
        result.notes = ["failure shown in: \(shown ?? "nowhere")"]
        if writeWhileFull.status != 0 {
            result.notes.append(
                "put while full: \(writeWhileFull.stderr.trimmingCharacters(in: .whitespacesAndNewlines).prefix(200))")
        }
        return result
    }

    /// Where a shows that it cannot store what it pulls: its peer row for b (state or last error),
    /// or a log line; nil when nowhere.
    static func failureShown(_ a: TortureAgent, peer b: TortureAgent) -> String? {
        if let row = try? a.peerRow(b.nodeID) {
            if let error = row.lastError, !error.isEmpty {
                return "peer table last_error: \(error.prefix(160))"
            }
            if row.state == .error { return "peer table state error" }
        }
        let lines = a.log.split(separator: "\n").filter {
            let lower = $0.lowercased()
            return lower.contains("full") || lower.contains("no space")
        }
        return lines.last.map { "log: \($0.suffix(200))" }
    }

    /// `count` new documents of about 1 KiB, `bulk_docs` of 1000; records each acknowledged revision.
    private func write(_ agent: TortureAgent, prefix: String, count: Int, into acknowledged: inout [String: String]) throws {
        let client = try agent.client(timeout: 120)
        let text = String(repeating: "0123456789abcdef", count: 62)
        for start in stride(from: 0, to: count, by: 1000) {
            let docs = (start..<min(start + 1000, count)).map { index in
                JSONValue.object([
                    "_id": .string(String(format: "%@-%06d", prefix, index)), "n": .int(Int64(index)), "text": .string(text),
                ])
            }
            guard case .written(let written) = try agent.call(Admin.BulkDocuments(docs: docs), on: client) else {
                throw ExperimentFailure("\(agent.name): bulk_docs answered as an import")
            }
            for row in written.results {
                if let rev = row.rev { acknowledged[row.id] = rev.description }
            }
        }
    }

    private func mount(_ arguments: [String], command: String = "mount") throws -> CommandResult {
        guard
            let path = ["/usr/bin/\(command)", "/bin/\(command)", "/usr/sbin/\(command)", "/sbin/\(command)"]
                .first(where: FileManager.default.isExecutableFile(atPath:))
        else { return CommandResult(status: 127, stdout: "", stderr: "no \(command) command") }
        return try runCommand(path, arguments, limit: 30)
    }
}
