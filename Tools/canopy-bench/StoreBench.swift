import ArgumentParser
import CanopyCore
import CanopyStore
import Foundation

/// `canopy-bench store`: the document store's write and read rates beside a raw SQLite ceiling
/// measured in the same run, in the same directory: plain INSERTs of the same body bytes into a
/// two-column table, one transaction per batch, with the store's pragmas (WAL, synchronous=NORMAL).
struct StoreBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "Document store: foreign inserts, local puts and gets vs raw SQLite inserts.")

    @Option(help: "Revisions per batched phase.") var count = 100_000
    @Option(help: "Revisions per transaction in batched phases.") var batch = 1_000
    @Option(help: "Local puts made one per transaction.") var singlePuts = 2_000
    @Option(help: "Single-document gets.") var gets = 20_000
    @Option(help: "Directory for the database files (default: a new temporary directory).") var directory: String?
    @Flag(help: "Print the results as JSON.") var json = false
    @Option(parsing: .upToNextOption, help: "Phases to run besides the ceiling: foreign local single gets (default: all).")
    var phases: [String] = ["foreign", "local", "single", "gets"]

    func validate() throws {
        guard count > 0, batch > 0, batch <= count, singlePuts > 0, gets > 0 else {
            throw ValidationError("counts must be positive and --batch at most --count")
        }
    }

    /// Runs the ceiling, then each selected phase on its own file, and prints the table.
    func run() throws {
        let base = directory.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("canopy-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        defer { if directory == nil { try? FileManager.default.removeItem(at: base) } }
        let bodies = (0..<count).map { StoreBenchData.body($0) }
        let canonical = bodies.map { CanonicalJSON.encode($0) }
        var results: [BenchResult] = []

        let ceiling = try StoreBenchPhases.rawCeiling(path: base.appendingPathComponent("raw.sqlite").path, bodies: canonical, batch: batch)
        results.append(BenchResult(name: "raw SQLite insert (ceiling)", operations: count, seconds: ceiling))

        let foreignPath = base.appendingPathComponent("foreign.sqlite").path
        if phases.contains("foreign") || phases.contains("gets") {
            let foreign = try StoreBenchPhases.foreignInserts(path: foreignPath, bodies: canonical, batch: batch)
            results.append(BenchResult(name: "foreign inserts, batched", operations: count, seconds: foreign))
        }
        if phases.contains("local") {
            let localPath = base.appendingPathComponent("local.sqlite").path
            let local = try StoreBenchPhases.localBatches(path: localPath, bodies: bodies, batch: batch)
            results.append(BenchResult(name: "local puts, batched", operations: count, seconds: local))
        }
        if phases.contains("single") {
            let singles = min(singlePuts, count)
            let single = try StoreBenchPhases.singlePuts(
                path: base.appendingPathComponent("single.sqlite").path, bodies: Array(bodies.prefix(singles)))
            results.append(BenchResult(name: "local puts, one per transaction", operations: singles, seconds: single))
        }
        if phases.contains("gets") {
            // Reads the documents the foreign phase wrote.
            let reads = try StoreBenchPhases.gets(path: foreignPath, documents: count, gets: gets)
            results.append(BenchResult(name: "single gets", operations: gets, seconds: reads))
        }

        let ceilingRate = Double(count) / ceiling
        try BenchReport.print(results, ceilingRate: ceilingRate, json: json)
    }
}

/// One measured phase.
struct BenchResult: Codable {
    let name: String
    let operations: Int
    let seconds: Double
    var perSecond: Double { Double(operations) / seconds }
}

/// Prints results as a table or JSON, each with its ratio to the ceiling.
enum BenchReport {
    /// Prints `results` with each rate as a fraction of `ceilingRate`.
    static func print(_ results: [BenchResult], ceilingRate: Double, json: Bool) throws {
        if json {
            let rows = results.map { result -> [String: JSONValue] in
                [
                    "name": .string(result.name), "operations": .int(Int64(result.operations)),
                    "seconds": .double(result.seconds), "perSecond": .double(result.perSecond.rounded()),
                    "ratioToCeiling": .double((result.perSecond / ceilingRate * 1000).rounded() / 1000),
                ]
            }
            let object = JSONValue.object(["results": .array(rows.map { .object($0) })])
            Swift.print(String(decoding: CanonicalJSON.encode(object), as: UTF8.self))
            return
        }
        let nameWidth = results.map(\.name.count).max() ?? 0
        Swift.print("\("phase".padding(toLength: nameWidth, withPad: " ", startingAt: 0))  \("ops".leftPad(8))  \("seconds".leftPad(8))  \("ops/s".leftPad(10))  \("vs ceiling".leftPad(10))")
        for result in results {
            let ratio = String(format: "%.0f%%", result.perSecond / ceilingRate * 100)
            Swift.print(
                "\(result.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0))  \(String(result.operations).leftPad(8))  \(String(format: "%.3f", result.seconds).leftPad(8))  \(String(format: "%.0f", result.perSecond).leftPad(10))  \(ratio.leftPad(10))")
        }
    }
}

extension String {
    fileprivate func leftPad(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
