import ArgumentParser
import CanopyCore

/// The arguments with the global options written before the command (`canopyctl --data-dir D
/// status`, the order the usage line shows) moved after it, where ArgumentParser, which parses
/// options per subcommand, looks for them.
func reorderedArguments(_ arguments: [String]) -> [String] {
    var leading: [String] = []
    var index = 0
    while index < arguments.count, arguments[index].hasPrefix("--") {
        let argument = arguments[index]
        let takesValue = argument == "--data-dir" || argument == "--socket"
        guard takesValue || argument == "--json" || argument.hasPrefix("--data-dir=") || argument.hasPrefix("--socket=") else { break }
        leading.append(argument)
        if takesValue, index + 1 < arguments.count {
            leading.append(arguments[index + 1])
            index += 1
        }
        index += 1
    }
    return Array(arguments[index...]) + leading
}

/// Why a command line names no command, or an unknown one, and the help to print after it.
struct CommandProblem {
    var message: String
    /// The group whose help follows the message (`peer`, `db`); nil: canopyctl's own.
    var group: (any ParsableCommand.Type)?
}

/// A usage failure for a command line with no command or an unknown one, at the top or inside
/// a group (`peer`, `db`). ArgumentParser would report an unknown word as an unknown option —
/// the global options are moved after the command name, so `--data-dir D peer ad X` blames
/// `--data-dir` — or accept an empty line with exit 0. Nil when every word up to a command that
/// runs is known, or the line asks for help or the version.
func commandProblem(_ arguments: [String]) -> CommandProblem? {
    var commands: [any ParsableCommand.Type] = Canopyctl.configuration.subcommands
    var parent: (any ParsableCommand.Type)?
    var path: [String] = []
    for word in arguments + [""] {
        let names = commands.map { $0._commandName }
        let listing = (path.isEmpty ? "the commands are: " : "the \(path.joined(separator: " ")) commands are: ") + names.joined(separator: ", ")
        if word.isEmpty {
            let missing = path.isEmpty ? "no command given" : "no command given after '\(path.joined(separator: " "))'"
            return CommandProblem(message: "\(missing); \(listing)", group: parent)
        }
        if ["-h", "--help", "--version", "--generate-completion-script", "--experimental-dump-help"].contains(where: word.hasPrefix)
            || (path.isEmpty && word == "help")
        {
            return nil
        }
        if word.hasPrefix("-") {
            // In a group, the option is usually a global one the reordering moved after it.
            let missing = path.isEmpty
                ? "no command given (\(word.prefix(80)) is an option; it goes with a command)"
                : "no command given after '\(path.joined(separator: " "))'"
            return CommandProblem(message: "\(missing); \(listing)", group: parent)
        }
        guard let command = commands.first(where: { $0._commandName == word }) else {
            let typed = (path + [String(word.prefix(80))]).joined(separator: " ")
            let suggestion = nearestName(to: word, among: names).map { " (did you mean '\((path + [$0]).joined(separator: " "))'?)" } ?? ""
            return CommandProblem(message: "unknown command '\(typed)'\(suggestion); \(listing)", group: parent)
        }
        let subcommands = command.configuration.subcommands
        if subcommands.isEmpty { return nil }
        commands = subcommands
        parent = command
        path.append(word)
    }
    return nil
}

/// The name in `names` closest to `word` by edit distance, when it is close enough to be what
/// was meant: at most two edits and fewer than the word has letters, or a name the word begins
/// (`stat` for `status`). Ties go to the name listed first.
func nearestName(to word: String, among names: [String]) -> String? {
    let typed = Array(word.lowercased())
    var best: (name: String, distance: Int)?
    for name in names {
        let distance = editDistance(typed, Array(name))
        if best == nil || distance < best!.distance { best = (name, distance) }
    }
    guard let best else { return nil }
    if best.distance <= 2 && best.distance < typed.count { return best.name }
    let prefixed = names.filter { $0.hasPrefix(word.lowercased()) }
    return typed.count >= 2 && prefixed.count == 1 ? prefixed[0] : nil
}

/// Edit distance with transpositions (optimal string alignment): an insertion, a deletion, a
/// substitution or two neighbours swapped count one each, so `stauts` is as near `status` as
/// `stats`.
func editDistance(_ a: [Character], _ b: [Character]) -> Int {
    guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
    // distance[i][j]: between the first i characters of a and the first j of b.
    var distance = (0...a.count).map { i in (0...b.count).map { j in i == 0 ? j : (j == 0 ? i : 0) } }
    for i in 1...a.count {
        for j in 1...b.count {
            let substitution = distance[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
            distance[i][j] = min(distance[i - 1][j] + 1, distance[i][j - 1] + 1, substitution)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                distance[i][j] = min(distance[i][j], distance[i - 2][j - 2] + 1)
            }
        }
    }
    return distance[a.count][b.count]
}

/// `--rev`, `--pick`: a revision id (`N-<32 hex>`), refused as a usage error when malformed.
extension RevisionID: ExpressibleByArgument {
    public init?(argument: String) { self.init(argument) }
}
