import ArgumentParser
import CanopyAgent
import CanopyCore
import CanopyStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `canopy-bench import`: `canopyctl import` of a `_bulk_docs` file into a running agent, as a
/// user runs it (two real processes, the file read in a stream), beside the ceiling of the
/// store's batched local puts of the same documents measured in the same run (in-process, no
/// socket, no JSON text: what bulk writes cost the store itself).
///
/// Two files: new documents (`new_edits` absent: each entry a new revision) and the same documents
/// as an export writes them (`new_edits: false`, with `_rev` and `_revisions`).
struct ImportBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import", abstract: "canopyctl import into a running agent vs the store's batched puts.")

    @Option(help: "Documents (about 1 KiB each).") var count = 100_000
    @Option(help: "Documents per transaction in the ceiling (canopyctl sends at most 2000 per request).") var batch = 2_000
    @OptionGroup var agents: AgentBenchOptions
    @Option(help: "The canopyctl binary (default: the one next to canopy-bench).") var canopyctl: String?
    @Flag(help: "Print the figures as JSON.") var json = false

    func run() throws {
        let (directory, remove) = agents.temporaryDirectory()
        defer { remove() }
        let bodies = (0..<count).map { StoreBenchData.body($0) }
        let ceiling = try StoreBenchPhases.localBatches(path: directory + "/ceiling.sqlite", bodies: bodies, batch: batch)
        let ceilingRate = Double(count) / ceiling

        let newFile = directory + "/new.json"
        try Self.writeBulkDocs(to: newFile, count: count, bodies: bodies, exported: false)
        let exportFile = directory + "/export.json"
        try Self.writeBulkDocs(to: exportFile, count: count, bodies: bodies, exported: true)
        let fileBytes = (try FileManager.default.attributesOfItem(atPath: newFile)[.size] as? Int) ?? 0

        var figures: [Figure] = []
        for (name, file) in [("import, new documents (bulk writes)", newFile), ("import, revisions as they are (new_edits false)", exportFile)] {
            let agent = try BenchAgent(name: "agent-\(figures.count)", parent: directory, canopyd: try agents.canopydPath())
            try agent.start()
            let cpuBefore = BenchClock.cpuSeconds(pid: agent.pid)
            let started = BenchClock.now()
            let ctl = try runCanopyctl(["--data-dir", agent.dataDir, "import", file])
            let seconds = BenchClock.now() - started
            let agentCPU = BenchClock.cpuSeconds(pid: agent.pid) - cpuBefore
            let stored = try agent.documentCount(try agent.client())
            guard stored == count else { throw ValidationError("\(name): the agent holds \(stored) documents, not \(count)") }
            let rss = try agent.peakResidentBytes()
            figures.append(Figure(
                name: name, value: Double(count) / seconds, unit: "docs/s", ceiling: ceilingRate,
                ceilingName: "store's batched puts",
                note: String(format: "%.2f s; CPU: canopyctl %.2f s, canopyd %.2f s; peak RSS canopyctl %.1f MiB, canopyd %.1f MiB; file %.1f MiB",
                             seconds, ctl.cpu, agentCPU, Double(ctl.peakRSS) / 1_048_576, Double(rss) / 1_048_576,
                             Double(fileBytes) / 1_048_576)))
            agent.stop()
        }
        figures.insert(Figure(name: "store's batched puts (ceiling)", value: ceilingRate, unit: "docs/s",
                              note: String(format: "%.2f s, %d per transaction", ceiling, batch)), at: 0)
        FigureReport.print(figures, json: json)
    }

    /// Runs canopyctl to completion; its CPU seconds come from wait4's rusage, its peak RSS from
    /// /proc (VmHWM, read while it runs: rusage's maxrss keeps the benchmark's own peak across
    /// the spawn, since Linux does not reset it on exec).
    private func runCanopyctl(_ arguments: [String]) throws -> (cpu: Double, peakRSS: Int) {
        let path = canopyctl ?? (URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("canopyctl").path)
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ValidationError("no canopyctl at \(path): build it (swift build -c release --product canopyctl) or pass --canopyctl")
        }
        var pid: pid_t = 0
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        guard posix_spawn(&pid, path, nil, nil, argv, environ) == 0 else { throw ValidationError("cannot start \(path)") }
        var status: Int32 = 0
        var usage = rusage()
        var peak = 0
        while true {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
                let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
            {
                peak = max(peak, kib * 1024)
            }
            let waited = wait4(pid, &status, WNOHANG, &usage)
            if waited == pid { break }
            guard waited == 0 else { throw ValidationError("waiting for canopyctl failed") }
            usleep(10_000)
        }
        guard status == 0 else { throw ValidationError("canopyctl \(arguments.joined(separator: " ")) exited with \(status)") }
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return (cpu, peak)
    }

    /// Writes a `_bulk_docs` file: new documents, or (`exported`) each as a first revision with
    /// its `_rev` and `_revisions` and `"new_edits": false`, as `canopyctl export` writes them.
    static func writeBulkDocs(to path: String, count: Int, bodies: [JSONValue], exported: Bool) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw ValidationError("cannot write \(path)")
        }
        defer { try? file.close() }
        file.write(Data((exported ? #"{"new_edits":false,"docs":["# : #"{"docs":["#).utf8))
        var chunk: [UInt8] = []
        for index in 0..<count {
            guard case .object(var members) = bodies[index] else { continue }
            members["_id"] = .string(StoreBenchData.documentID(index))
            if exported {
                let revision = RevisionHasher.revisionID(parent: nil, kind: .live, body: bodies[index])
                members["_rev"] = .string(revision.description)
                members["_revisions"] = .object(["start": .int(1), "ids": .array([.string(revision.digestHex)])])
            }
            if index > 0 { chunk.append(UInt8(ascii: ",")) }
            chunk += CanonicalJSON.encode(.object(members))
            if chunk.count > 1 << 20 {
                file.write(Data(chunk))
                chunk = []
            }
        }
        chunk += Array("]}\n".utf8)
        file.write(Data(chunk))
    }
}
