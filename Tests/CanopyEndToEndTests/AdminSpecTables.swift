import Foundation

/// `Protocol/admin-v1.md` as the conformance tests read it at run time: the commands of §6 with
/// their arguments and result members, the error codes of §4 and the event types of §5. Read from
/// the markdown every run, so the tests follow the spec as it grows.
///
/// The rules, kept small so a reader of the spec can predict them:
/// - a table row is split on `|` (`\|` inside a cell is a literal bar);
/// - text in parentheses is commentary and is skipped;
/// - a backticked lowercase name (`doc`, `rev?`, `delete: true` → `delete`) counts when it starts
///   the cell or follows `,`, `;`, `:`, `/` or the word "of" — so names mentioned in prose ("among
///   `listen`", "with `wait`", "where `address`") do not;
/// - names starting with `_` (document members) and error codes (§4) are never result members;
/// - a backticked `{a, b:{c}, d:[{e}]}` lists the members of the objects in the member named just
///   before it (`peers`: rows `{…}`); several such spans (alternative shapes) add up;
/// - an arguments cell "as `cmd`…" means the same arguments as `cmd`;
/// - in §5's "Event types:" paragraph, a backticked dotted name that is not a command is an event
///   type, and the names after it (up to the next type) are what its `data` may hold.
struct AdminSpec {
    /// Member names at one level of a result, each with the members the spec lists inside it.
    /// An empty `members` means the spec does not describe the content (it is not checked).
    struct Members: Equatable {
        var members: [String: Members] = [:]
    }

    struct Command {
        var name: String
        /// Argument names, without the `?` of optional ones.
        var arguments: [String]
        var results: Members
    }

    var commands: [Command]
    var errorCodes: [String]
    var eventTypes: [String]
    /// The names §5 mentions in each event type's description: its `data` members must be among
    /// them (a data member the spec does not mention is reported; one it mentions need not occur).
    var eventMentions: [String: Set<String>]

    static let path = "Protocol/admin-v1.md"

    /// Reads and parses the spec from the source tree.
    static func load() throws -> AdminSpec {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return try parse(String(contentsOf: root.appendingPathComponent(path), encoding: .utf8))
    }

    struct ParseError: Error, CustomStringConvertible {
        var description: String
    }

    static func parse(_ text: String) throws -> AdminSpec {
        let errorCodes = try tableRows(text, section: "## 4.").compactMap { backticked($0.first ?? "").first }
        var commands: [Command] = []
        for row in try tableRows(text, section: "## 6.") {
            guard row.count >= 3, let name = backticked(row[0]).first else { throw ParseError(description: "bad §6 row: \(row)") }
            var arguments = names(in: row[1], excluding: []).map(\.name)
            if row[1].trimmingCharacters(in: .whitespaces).hasPrefix("as `"), let same = backticked(row[1]).first,
                let other = commands.first(where: { $0.name == same })
            {
                arguments = other.arguments
            }
            var results = Members()
            for (member, inside) in names(in: row[2], excluding: Set(errorCodes)) where !member.hasPrefix("_") {
                results.members[member] = inside
            }
            commands.append(Command(name: name, arguments: arguments, results: results))
        }
        // The paragraph of §5 that starts "Event types:" (up to the next blank line).
        guard let start = text.range(of: "Event types:") else { throw ParseError(description: "no \"Event types:\" paragraph in §5") }
        let paragraph = text[start.upperBound...].components(separatedBy: "\n\n")[0]
        // Every backticked name after a type, up to the next type, is mentioned for it; a command
        // named there ("the `sync` result members") mentions that command's result members.
        var eventTypes: [String] = []
        var eventMentions: [String: Set<String>] = [:]
        for code in backticked(paragraph) {
            let dotted = code.contains(".") && code.allSatisfy { $0.isLowercase || $0 == "." || $0 == "_" }
            if dotted && !commands.contains(where: { $0.name == code }) {
                eventTypes.append(code)
            } else if let type = eventTypes.last {
                eventMentions[type, default: []].insert(code)
                eventMentions[type, default: []].formUnion(commands.first { $0.name == code }?.results.members.keys ?? [:].keys)
            }
        }
        guard !errorCodes.isEmpty, !commands.isEmpty, !eventTypes.isEmpty else { throw ParseError(description: "an empty table in \(path)") }
        return AdminSpec(commands: commands, errorCodes: errorCodes, eventTypes: eventTypes, eventMentions: eventMentions)
    }

    /// The body rows of the first table after the heading starting with `section`, as cells.
    static func tableRows(_ text: String, section: String) throws -> [[String]] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(where: { $0.hasPrefix(section) }) else { throw ParseError(description: "no section \(section)") }
        var rows: [[String]] = []
        for line in lines[(start + 1)...] {
            if line.hasPrefix("|") {
                rows.append(cells(line))
            } else if !rows.isEmpty || line.hasPrefix("## ") {
                break
            }
        }
        guard rows.count > 2 else { throw ParseError(description: "no table in \(section)") }
        return Array(rows.dropFirst(2))  // the header and the `---` line
    }

    /// A row's cells: split on `|` but not on `\|`.
    static func cells(_ line: String) -> [String] {
        var cells: [String] = []
        var current = ""
        var escaped = false
        for character in line {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "|" {
                cells.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            } else {
                current.append(character)
            }
        }
        return Array(cells.dropFirst())  // what precedes the first `|`
    }

    /// Every backticked span's text, in order.
    static func backticked(_ text: String) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// The text with parenthesised commentary removed (parentheses inside backticks are kept).
    static func withoutParentheses(_ text: String) -> String {
        var result = ""
        var depth = 0
        var inCode = false
        for character in text {
            if character == "`" { inCode.toggle() }
            if !inCode && character == "(" { depth += 1; continue }
            if !inCode && character == ")" && depth > 0 { depth -= 1; continue }
            if depth == 0 { result.append(character) }
        }
        return result
    }

    /// The member or argument names a cell lists, by the rules above, with the members each
    /// `{…}` that follows it describes.
    static func names(in cell: String, excluding excluded: Set<String>) -> [(name: String, inside: Members)] {
        let parts = withoutParentheses(cell).split(separator: "`", omittingEmptySubsequences: false).map(String.init)
        var found: [(name: String, inside: Members)] = []
        for index in stride(from: 1, to: parts.count, by: 2) {
            let code = parts[index].trimmingCharacters(in: .whitespaces)
            if code.hasPrefix("{") {
                if !found.isEmpty { found[found.count - 1].inside.members.merge(structure(code).members) { $1 } }
                continue
            }
            let before = parts[index - 1].trimmingCharacters(in: .whitespaces)
            let listed = (index == 1 && before.isEmpty) || [",", ";", ":", "/"].contains(before.last.map(String.init) ?? "")
                || before.hasSuffix(" of") || before == "of"
            let name = String(code.prefix { $0 != ":" }).trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "?", with: "")
            guard listed, isName(name), !excluded.contains(name), !found.contains(where: { $0.name == name }) else { continue }
            found.append((name, Members()))
        }
        return found
    }

    /// A lowercase protocol name: `node_id`, `_id`; not `peer.add`, `revs-limit` or `HOST:PORT`.
    static func isName(_ text: String) -> Bool {
        guard let first = text.first, first.isLowercase || first == "_" else { return false }
        return text.allSatisfy { ($0.isLowercase && $0.isASCII) || $0.isNumber || $0 == "_" }
    }

    /// `{a, b?, c:{d,e}, f:[rev], g:[{h}]}` → a, b, c (d, e), f, g (h).
    static func structure(_ code: String) -> Members {
        guard let open = code.firstIndex(of: "{"), let close = code.lastIndex(of: "}"), open < close else { return Members() }
        var members = Members()
        var depth = 0
        var item = ""
        func take() {
            let name = String(item.prefix { $0 != ":" }).trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "?", with: "")
            if isName(name) { members.members[name] = item.contains("{") ? structure(item) : Members() }
            item = ""
        }
        for character in code[code.index(after: open)..<close] {
            if "{[".contains(character) { depth += 1 }
            if "}]".contains(character) { depth -= 1 }
            if character == "," && depth == 0 { take() } else { item.append(character) }
        }
        take()
        return members
    }
}
