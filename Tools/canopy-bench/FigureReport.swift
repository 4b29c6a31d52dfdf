import CanopyCore
import Foundation

/// One measured figure of an agent benchmark, with the ceiling measured in the same run where
/// there is one (a rate ceiling is higher-is-better; a time ceiling is the floor it cannot beat).
struct Figure {
    let name: String
    let value: Double
    let unit: String
    var ceiling: Double? = nil
    /// What the ceiling is, for the reader.
    var ceilingName: String? = nil
    /// Free text: CPU seconds, conditions.
    var note: String = ""

    /// value / ceiling for rates, ceiling / value for times (so 100 % means "as good as the
    /// ceiling" either way).
    var ratio: Double? {
        guard let ceiling, ceiling > 0, value > 0 else { return nil }
        return unit.hasSuffix("/s") ? value / ceiling : ceiling / value
    }
}

/// Prints agent-benchmark figures as a table or as canonical JSON.
enum FigureReport {
    static func print(_ figures: [Figure], json: Bool) {
        if json {
            let rows = figures.map { figure -> JSONValue in
                var row: [String: JSONValue] = [
                    "name": .string(figure.name), "value": .double(rounded(figure.value)), "unit": .string(figure.unit),
                ]
                if let ceiling = figure.ceiling { row["ceiling"] = .double(rounded(ceiling)) }
                if let name = figure.ceilingName { row["ceilingName"] = .string(name) }
                if let ratio = figure.ratio { row["ratioToCeiling"] = .double(rounded(ratio)) }
                if !figure.note.isEmpty { row["note"] = .string(figure.note) }
                return .object(row)
            }
            Swift.print(String(decoding: CanonicalJSON.encode(.object(["figures": .array(rows)])), as: UTF8.self))
            return
        }
        let width = figures.map(\.name.count).max() ?? 0
        for figure in figures {
            var line = figure.name.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                + String(format: "%12.3f %-6@", figure.value, figure.unit as NSString)
            if let ceiling = figure.ceiling {
                line += String(format: "  ceiling %.3f (%@)", ceiling, (figure.ceilingName ?? "") as NSString)
            }
            if let ratio = figure.ratio { line += String(format: "  %.0f%%", ratio * 100) }
            if !figure.note.isEmpty { line += "  [\(figure.note)]" }
            Swift.print(line)
        }
    }

    private static func rounded(_ value: Double) -> Double { (value * 1000).rounded() / 1000 }
}
