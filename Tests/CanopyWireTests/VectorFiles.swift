import Foundation

/// Reading and writing `Protocol/vectors/*.json` and the spec, located from this source file's
/// path so the tests work from any working directory.
enum VectorFiles {
    /// The repository root: three levels above `Tests/CanopyWireTests/VectorFiles.swift`.
    static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }

    /// True when the run should (re)write the vector files from the fixtures.
    static var regenerating: Bool { ProcessInfo.processInfo.environment["CANOPY_WRITE_VECTORS"] == "1" }

    static func readJSON(_ relative: String) throws -> [String: Any] {
        let data = try Data(contentsOf: url(relative))
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw VectorFileError.notAnObject(relative)
        }
        return object
    }

    static func writeJSON(_ object: [String: Any], to relative: String) throws {
        var data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        data.append(0x0A)
        try data.write(to: url(relative))
    }

    static func readText(_ relative: String) throws -> String {
        try String(contentsOf: url(relative), encoding: .utf8)
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }

    static func bytes(hex: String) throws -> [UInt8] {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { throw VectorFileError.badHex(hex) }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index...index + 1], as: UTF8.self), radix: 16) else {
                throw VectorFileError.badHex(hex)
            }
            out.append(byte)
        }
        return out
    }

    /// The rows of the first markdown table after the heading line `heading`, as cell arrays
    /// (the header and separator rows dropped, backticks stripped).
    static func markdownTable(in text: String, after heading: String) throws -> [[String]] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(where: { $0.hasPrefix(heading) }) else { throw VectorFileError.noSection(heading) }
        var rows: [[String]] = []
        var inTable = false
        for line in lines[(start + 1)...] {
            if line.hasPrefix("|") {
                inTable = true
                let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                rows.append(cells.map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "`", with: "") })
            } else if inTable {
                break
            } else if line.hasPrefix("## ") {
                break
            }
        }
        guard rows.count >= 2 else { throw VectorFileError.noSection(heading + " table") }
        return Array(rows.dropFirst(2))
    }
}

enum VectorFileError: Error {
    case notAnObject(String)
    case badHex(String)
    case noSection(String)
    case missing(String)
}
