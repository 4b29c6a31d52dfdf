import Foundation
import Testing

/// Each Swift module under `Sources/` has a DocC root page, `Sources/<Module>/<Module>.docc/<Module>.md`,
/// whose `## Topics` section lists the module's public surface: every top-level `public` (or `open`)
/// class, struct, enum, protocol, actor and typealias, as a ``Symbol`` link, and nothing else.
/// A type made public without a line there, or a line left behind when a type is renamed, removed
/// or made `package`, fails here with its name.
///
/// A module that re-exports others (`@_exported import`) may also list their
/// types, written `Module/Type`; only its own declarations must all be listed.
@Suite("module documentation lists each module's public surface")
struct ModuleSurfaceTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let sources = root.appendingPathComponent("Sources")

    /// The modules written in Swift: every directory of `Sources/` holding a `.swift` file (the
    /// C library wrappers hold only a module map).
    static var swiftModules: [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: sources.path)) ?? []
        return names.filter { !swiftFiles(of: $0).isEmpty }.sorted()
    }

    /// The module's Swift files, in subdirectories too, but not inside its `.docc` catalog.
    static func swiftFiles(of module: String) -> [URL] {
        let directory = sources.appendingPathComponent(module)
        guard let walk = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else {
            return []
        }
        var files: [URL] = []
        for case let url as URL in walk {
            if url.pathExtension == "docc" { walk.skipDescendants() }
            if url.pathExtension == "swift" { files.append(url) }
        }
        return files.sorted { $0.path < $1.path }
    }

    static func rootPage(of module: String) -> URL {
        sources.appendingPathComponent("\(module)/\(module).docc/\(module).md")
    }

    /// A top-level type declaration: at the start of a line (nested declarations are indented),
    /// after any attributes, `public` or `open`, then the modifiers that may precede the keyword.
    /// (Computed, as a `Regex` is not `Sendable` and cannot be a stored static; each access builds
    /// it again, so callers keep one in a local.)
    static var publicType: Regex<(Substring, Substring)> {
        #/
        ^ (?: @ [A-Za-z_] [\w.]* (?: \( [^)\n]* \) )? \h+ )*        # attributes
        (?: public | open ) \h+
        (?: (?: final | indirect ) \h+ )*
        (?: class | struct | enum | protocol | actor | typealias ) \h+
        ( [A-Za-z_] \w* )
        /#
    }
    static var reexport: Regex<(Substring, Substring)> { #/^@_exported\h+import\h+(\w+)/# }
    static var symbolLink: Regex<(Substring, Substring)> { #/``([^`]+)``/# }

    /// The names of the module's top-level public types.
    static func publicTypes(of module: String) throws -> Set<String> {
        let declaration = publicType
        var names: Set<String> = []
        for file in swiftFiles(of: module) {
            for line in try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
            where line.hasPrefix("public") || line.hasPrefix("open") || line.hasPrefix("@") {
                // Only lines that can open a top-level declaration go to the regex.
                if let match = line.firstMatch(of: declaration) { names.insert(String(match.1)) }
            }
        }
        return names
    }

    /// The modules this one re-exports with `@_exported import`.
    static func reexports(of module: String) throws -> [String] {
        let declaration = reexport
        return try swiftFiles(of: module).flatMap { file in
            try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
                .compactMap { $0.firstMatch(of: declaration).map { String($0.1) } }
        }.sorted()
    }

    /// The page's title line and the symbol links of the list items under `## Topics`, up to the
    /// next level-1 or level-2 heading.
    static func page(of module: String) throws -> (title: String, topics: [String]) {
        let lines = try String(contentsOf: rootPage(of: module), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let title = lines.first ?? ""
        guard let start = lines.firstIndex(of: "## Topics") else { return (title, []) }
        let link = symbolLink
        var links: [String] = []
        for line in lines[(start + 1)...] {
            if line.hasPrefix("# ") || line.hasPrefix("## ") { break }
            guard line.trimmingCharacters(in: .whitespaces).hasPrefix("- ") else { continue }
            links += line.matches(of: link).map { String($0.1) }
        }
        return (title, links)
    }

    @Test("every Swift module under Sources has a DocC root page titled with the module's symbol")
    func everyModuleHasARootPage() throws {
        let modules = Self.swiftModules
        #expect(modules.count >= 8, "found only \(modules) under \(Self.sources.path)")
        for module in modules {
            let path = Self.rootPage(of: module).path
            guard FileManager.default.fileExists(atPath: path) else {
                Issue.record("\(module) has no DocC root page at \(path)")
                continue
            }
            let title = try Self.page(of: module).title
            #expect(title == "# ``\(module)``", "\(path) must open with # ``\(module)``, not \(title)")
        }
    }

    @Test("each root page's Topics list every public type of its module and nothing that is not one", arguments: swiftModules)
    func topicsListThePublicSurface(module: String) throws {
        let page = Self.rootPage(of: module).path
        guard FileManager.default.fileExists(atPath: page) else { return }  // reported by the test above
        let own = try Self.publicTypes(of: module)
        let reexported = try Self.reexports(of: module)
        var allowed: Set<String> = own
        for other in reexported {
            for type in try Self.publicTypes(of: other) {
                allowed.insert("\(other)/\(type)")
                allowed.insert(type)
            }
        }
        let topics = try Self.page(of: module).topics
        // `Module/Type` of this module's own types names the same symbol as `Type`.
        let listed = topics.map { $0.hasPrefix(module + "/") ? String($0.dropFirst(module.count + 1)) : $0 }
        let unlisted = own.subtracting(listed).sorted()
        let extra = Set(listed).subtracting(allowed).sorted()
        let twice = Dictionary(grouping: listed, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        #expect(!topics.isEmpty, "\(page) lists no symbols under ## Topics")
        #expect(unlisted.isEmpty, "public types of \(module) not listed under ## Topics of \(page): \(unlisted.joined(separator: ", "))")
        let owners = ([module] + reexported).joined(separator: ", ")
        #expect(extra.isEmpty, "listed under ## Topics of \(page) but not a top-level public type of \(owners): \(extra.joined(separator: ", "))")
        #expect(twice.isEmpty, "listed more than once in \(page): \(twice.joined(separator: ", "))")
    }
}
