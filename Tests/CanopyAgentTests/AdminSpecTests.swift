import CanopyAgent
import Foundation
import Testing

/// Protocol/admin-v1.md, read from the source tree.
private let spec: String = {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    return (try? String(contentsOf: root.appendingPathComponent("Protocol/admin-v1.md"), encoding: .utf8)) ?? ""
}()

/// The first-column backquoted names of the table in the section starting with `heading`.
private func tableNames(under heading: String) -> [String] {
    guard let start = spec.range(of: heading) else { return [] }
    let section = spec[start.upperBound...]
    var names: [String] = []
    var inTable = false
    for line in section.split(separator: "\n", omittingEmptySubsequences: false) {
        if line.hasPrefix("| `") {
            inTable = true
            let cell = line.dropFirst(3).prefix { $0 != "`" }
            names.append(String(cell))
        } else if inTable && !line.hasPrefix("|") {
            break
        }
    }
    return names
}

@Suite("Protocol/admin-v1.md matches the code")
struct AdminSpecTests {
    @Test("the spec's error-code table lists exactly the codes the agent sends")
    func errorCodes() {
        #expect(tableNames(under: "## 4. Error codes").sorted() == AdminErrorCode.allCases.map(\.rawValue).sorted())
    }

    @Test("the spec's command table lists exactly the commands the agent serves")
    func commands() {
        #expect(tableNames(under: "## 6. Commands").sorted() == Agent.commandNames.sorted())
    }

    @Test("the spec's line limit and ring size are the code's")
    func limits() {
        #expect(spec.contains("`adminLineBytesMax` = 1 MiB (\(AgentLimits.adminLineBytesMax) bytes"))
        #expect(spec.contains("`eventRingCapacity` (\(AgentLimits.eventRingCapacity))"))
        #expect(spec.contains("`adminConnectionsMax` (\(AgentLimits.adminConnectionsMax))"))
    }
}
