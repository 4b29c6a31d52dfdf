import ArgumentParser
import CanopyAgent
import CanopyCore
import Foundation

/// What a figure must be for the experiment to pass.
enum Target {
    case equal(Double)
    case atMost(Double)
    case below(Double)
    case atLeast(Double)
    /// A yes/no figure that must be yes.
    case yes

    func holds(_ value: Double) -> Bool {
        switch self {
        case .equal(let bound): return value == bound
        case .atMost(let bound): return value <= bound
        case .below(let bound): return value < bound
        case .atLeast(let bound): return value >= bound
        case .yes: return value != 0
        }
    }

    var text: String {
        switch self {
        case .equal(let bound): return "= \(Figure.format(bound))"
        case .atMost(let bound): return "≤ \(Figure.format(bound))"
        case .below(let bound): return "< \(Figure.format(bound))"
        case .atLeast(let bound): return "≥ \(Figure.format(bound))"
        case .yes: return "yes"
        }
    }
}

/// One measured figure: a count, seconds, MiB, a rate, or yes/no.
struct Figure {
    enum Kind { case count, seconds, mebibytes, perMinute, percent, flag }

    /// The JSON member name (snake_case).
    let key: String
    /// What a person reads.
    let label: String
    let value: Double
    var kind: Kind = .count
    var target: Target? = nil

    /// nil when the figure has no target.
    var met: Bool? { target.map { $0.holds(value) } }

    static func count(_ key: String, _ label: String, _ value: Int, target: Target? = nil) -> Figure {
        Figure(key: key, label: label, value: Double(value), kind: .count, target: target)
    }

    static func seconds(_ key: String, _ label: String, _ value: Double, target: Target? = nil) -> Figure {
        Figure(key: key, label: label, value: value, kind: .seconds, target: target)
    }

    static func flag(_ key: String, _ label: String, _ value: Bool, required: Bool = false) -> Figure {
        Figure(key: key, label: label, value: value ? 1 : 0, kind: .flag, target: required ? .yes : nil)
    }

    var valueText: String {
        switch kind {
        case .count: return Self.format(value)
        case .seconds: return String(format: "%.3f s", value)
        case .mebibytes: return String(format: "%.1f MiB", value)
        case .perMinute: return String(format: "%.1f /min", value)
        case .percent: return String(format: "%.0f %%", value)
        case .flag: return value != 0 ? "yes" : "no"
        }
    }

    var json: JSONValue {
        var members: [String: JSONValue] = ["label": .string(label)]
        switch kind {
        case .flag: members["value"] = .bool(value != 0)
        case .count: members["value"] = .int(Int64(value))
        default: members["value"] = .double((value * 1000).rounded() / 1000)
        }
        let units: [Kind: String] = [.seconds: "s", .mebibytes: "MiB", .perMinute: "lines/min", .percent: "%"]
        if let unit = units[kind] { members["unit"] = .string(unit) }
        if let target, let met {
            members["target"] = .string(target.text)
            members["met"] = .bool(met)
        }
        return .object(members)
    }

    static func format(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
    }
}

/// What one experiment measured.
struct ExperimentResult {
    let name: String
    /// One line: what was done.
    let summary: String
    var figures: [Figure] = []
    /// Observations worth a line each (what the agent logged, why a trial ended as it did).
    var notes: [String] = []
    /// Why the experiment did not run (then it neither passes nor fails).
    var skipped: String? = nil

    var missed: [Figure] { figures.filter { $0.met == false } }
    var passed: Bool { missed.isEmpty }

    static func skip(_ name: String, _ reason: String) -> ExperimentResult {
        ExperimentResult(name: name, summary: "skipped: \(reason)", skipped: reason)
    }

    var json: JSONValue {
        var members: [String: JSONValue] = [
            "experiment": .string(name), "summary": .string(summary), "passed": .bool(passed),
            "figures": .object(Dictionary(uniqueKeysWithValues: figures.map { ($0.key, $0.json) })),
            "notes": .array(notes.map { .string($0) }),
        ]
        if let skipped { members["skipped"] = .string(skipped) }
        return .object(members)
    }

    /// The human-readable report.
    var text: String {
        var lines = ["\(name): \(summary)"]
        if skipped != nil { return lines[0] }
        let width = figures.map(\.label.count).max() ?? 0
        for figure in figures {
            var line =
                "  " + figure.label.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                + figure.valueText.leftPadded(to: 14)
            if let target = figure.target, let met = figure.met {
                line += "   target \(target.text)  " + (met ? "ok" : "MISSED")
            }
            lines.append(line)
        }
        for note in notes { lines.append("  note: \(note)") }
        lines.append(passed ? "  every target met" : "  targets missed: " + missed.map(\.label).joined(separator: ", "))
        return lines.joined(separator: "\n")
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}

/// A subcommand that runs one experiment: `run` prints its result and exits with its status.
protocol Experiment: ParsableCommand {
    var common: CommonOptions { get }
    func experiment() throws -> ExperimentResult
}

extension Experiment {
    func run() throws {
        Report.finish([try Report.running { try experiment() }], json: common.json)
    }
}

/// Prints results and ends the process: status 0 when every target was met (or the experiment
/// was skipped), 1 when one was missed, 3 when an experiment could not be carried out (an agent
/// that would not start, a request that failed).
enum Report {
    /// Runs an experiment; a failure of the experiment itself ends the process with status 3.
    static func running(_ experiment: () throws -> ExperimentResult) throws -> ExperimentResult {
        do {
            return try experiment()
        } catch let failure as ExperimentFailure {
            couldNotBeCarriedOut(failure)
        } catch let failure as AdminSocketClient.ClientError {
            couldNotBeCarriedOut(failure)
        }
    }

    private static func couldNotBeCarriedOut(_ failure: any Error) -> Never {
        // After a signal the agents were killed under the experiment: that is no failure of its own.
        while Cleanup.shared.isTerminating { pause(1) }
        FileHandle.standardError.write(Data("canopy-torture: the experiment could not be carried out: \(failure)\n".utf8))
        exit(3)
    }

    static func finish(_ results: [ExperimentResult], json: Bool, table: Bool = false) -> Never {
        if json {
            let value: JSONValue =
                results.count == 1 && !table
                ? results[0].json
                : .object(["experiments": .array(results.map(\.json)), "passed": .bool(results.allSatisfy(\.passed))])
            print(String(decoding: CanonicalJSON.encode(value), as: UTF8.self))
        } else {
            print(results.map(\.text).joined(separator: "\n\n"))
            if table { print("\n" + summaryTable(results)) }
        }
        exit(results.allSatisfy(\.passed) ? 0 : 1)
    }

    /// One row per experiment: its targeted figures and whether they held.
    static func summaryTable(_ results: [ExperimentResult]) -> String {
        var rows = [("experiment", "figures with a target", "result")]
        for result in results {
            let figures =
                result.skipped
                ?? result.figures.filter { $0.target != nil }
                .map { "\($0.label) \($0.valueText)" }.joined(separator: "; ")
            rows.append((result.name, figures, result.skipped != nil ? "skipped" : result.passed ? "ok" : "MISSED"))
        }
        let first = rows.map(\.0.count).max() ?? 0
        let third = rows.map(\.2.count).max() ?? 0
        return rows.map {
            $0.0.padding(toLength: first, withPad: " ", startingAt: 0) + "  "
                + $0.2.padding(toLength: third, withPad: " ", startingAt: 0) + "  " + $0.1
        }.joined(separator: "\n")
    }
}
