import CanopyAgent
import CanopyCore
import Foundation

/// What the conformance scenarios sent to and saw from real agents: every request goes through a
/// `RecordingClient`, which records it here, so coverage of the spec is computed, not claimed.
final class AdminCoverage: @unchecked Sendable {
    private let lock = NSLock()
    /// Successful responses' result members (without `id` and `ok`), per command.
    private var results: [String: [[String: JSONValue]]] = [:]
    /// Argument names sent in requests that succeeded, per command.
    private var arguments: [String: Set<String>] = [:]
    private var errorCodes: Set<String> = []
    private var eventTypes: Set<String> = []
    /// `data` member names seen, per event type.
    private var eventData: [String: Set<String>] = [:]

    func recordResponse(command: String?, arguments sent: [String], response: [String: JSONValue]) {
        lock.withLock {
            if response["ok"] == .bool(true), let command {
                var result = response
                result["id"] = nil
                result["ok"] = nil
                results[command, default: []].append(result)
                arguments[command, default: []].formUnion(sent)
            } else if case .string(let code)? = response["error"]?.objectValue?["code"] {
                errorCodes.insert(code)
            } else {
                errorCodes.insert("(a failure without error.code: \(response))")
            }
        }
    }

    /// Records a streamed line: an `{"event":{…}}` counts its type.
    func recordStreamLine(_ line: [String: JSONValue]) {
        guard case .object(let event)? = line["event"] else { return }
        lock.withLock {
            guard case .string(let type)? = event["type"] else {
                eventTypes.insert("(an event without a type)")
                return
            }
            eventTypes.insert(type)
            eventData[type, default: []].formUnion(event["data"]?.objectValue?.keys ?? [:].keys)
        }
    }

    /// What the spec lists that was not exercised, and what the agents did that the spec does not
    /// list, each as readable items ("result peers.peers.rejected", "event peer.pending", …).
    func compare(with spec: AdminSpec) -> (missing: [String], unlisted: [String]) {
        lock.withLock {
            var missing: [String] = []
            var unlisted: [String] = []
            for command in spec.commands {
                guard let seen = results[command.name] else {
                    missing.append("command \(command.name)")
                    continue
                }
                for argument in command.arguments where !(arguments[command.name] ?? []).contains(argument) {
                    missing.append("argument \(command.name).\(argument)")
                }
                Self.compare(command.results, seen.map(JSONValue.object), path: command.name, &missing, &unlisted)
            }
            let commands = Set(spec.commands.map(\.name))
            for (command, sent) in arguments {
                guard commands.contains(command) else {
                    unlisted.append("command \(command)")
                    continue
                }
                let listed = Set(spec.commands.first { $0.name == command }!.arguments)
                unlisted += sent.subtracting(listed).sorted().map { "argument \(command).\($0)" }
            }
            missing += Set(spec.errorCodes).subtracting(errorCodes).sorted().map { "error \($0)" }
            unlisted += errorCodes.subtracting(spec.errorCodes).sorted().map { "error \($0)" }
            missing += Set(spec.eventTypes).subtracting(eventTypes).sorted().map { "event \($0)" }
            unlisted += eventTypes.subtracting(spec.eventTypes).sorted().map { "event \($0)" }
            for (type, names) in eventData where spec.eventTypes.contains(type) {
                unlisted += names.subtracting(spec.eventMentions[type] ?? []).sorted().map { "event data \(type).\($0)" }
            }
            return (missing.sorted(), unlisted.sorted())
        }
    }

    /// Compares the members the spec lists at one level with the objects seen there (arrays are
    /// looked through: a row member describes every row).
    private static func compare(_ spec: AdminSpec.Members, _ values: [JSONValue], path: String, _ missing: inout [String], _ unlisted: inout [String]) {
        let objects = values.flatMap { value -> [[String: JSONValue]] in
            switch value {
            case .object(let members): return [members]
            case .array(let elements): return elements.compactMap(\.objectValue)
            default: return []
            }
        }
        let seenNames = Set(objects.flatMap(\.keys))
        for (name, inside) in spec.members.sorted(by: { $0.key < $1.key }) {
            guard seenNames.contains(name) else {
                missing.append("result \(path).\(name)")
                continue
            }
            guard !inside.members.isEmpty else { continue }
            let nested = objects.compactMap { $0[name] }.flatMap { value -> [JSONValue] in
                if case .array(let elements) = value { return elements }
                return [value]
            }
            compare(inside, nested, path: "\(path).\(name)", &missing, &unlisted)
        }
        unlisted += seenNames.subtracting(spec.members.keys).sorted().map { "result \(path).\($0)" }
    }
}

/// An admin client that records every request, response and event line in an `AdminCoverage`.
/// Lines that are not the awaited response (events, resolver questions) are kept in order for
/// `nextStreamLine`.
final class RecordingClient {
    let coverage: AdminCoverage
    private let client: AdminSocketClient
    private var nextID: Int64 = 1
    private var held: [[String: JSONValue]] = []

    init(socketPath: String, _ coverage: AdminCoverage) throws {
        self.coverage = coverage
        client = try AdminSocketClient(path: socketPath, receiveTimeoutSeconds: 120)
    }

    convenience init(_ agent: AgentProcess, _ coverage: AdminCoverage) throws {
        try self.init(socketPath: agent.socketPath, coverage)
    }

    /// Sends `{"id":N,"cmd":command,…arguments}` and returns its response, or the `busy` line
    /// of an agent at its client limit (which may close before the request is sent).
    @discardableResult
    func request(_ command: String, _ arguments: [String: JSONValue] = [:]) throws -> [String: JSONValue] {
        let id = nextID
        nextID += 1
        var members = arguments
        members["id"] = .int(id)
        members["cmd"] = .string(command)
        do {
            try client.sendLine(CanonicalJSON.encode(.object(members)))
        } catch {
            guard let line = try? read(), AdminSocketClient.isBusy(line) else { throw error }
            coverage.recordResponse(command: command, arguments: Array(arguments.keys), response: line)
            return line
        }
        while true {
            let line = try read()
            if line["id"] == .int(id) || AdminSocketClient.isBusy(line) {
                coverage.recordResponse(command: command, arguments: Array(arguments.keys), response: line)
                return line
            }
            held.append(line)
        }
    }

    /// Sends an upload request with `content` as its bytes (Protocol/admin-v1.md §2) and returns
    /// its response.
    @discardableResult
    func upload(_ command: String, _ arguments: [String: JSONValue], _ content: [UInt8]) throws -> [String: JSONValue] {
        var offset = 0
        let response = try client.upload(command, arguments, length: Int64(content.count)) { buffer in
            let count = min(buffer.count, content.count - offset)
            content.withUnsafeBytes { source in buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[offset..<(offset + count)])) }
            offset += count
            return count
        }
        coverage.recordResponse(command: command, arguments: Array(arguments.keys) + ["length"], response: response)
        return response
    }

    /// Sends a download request and returns its response; the bytes after it go to `content`.
    @discardableResult
    func download(_ command: String, _ arguments: [String: JSONValue], into content: inout [UInt8]) throws -> [String: JSONValue] {
        var received: [UInt8] = []
        let response = try client.download(command, arguments) { received += $0 }
        content = received
        coverage.recordResponse(command: command, arguments: Array(arguments.keys), response: response)
        return response
    }

    /// Sends a raw line (a malformed request) and returns the next response to it.
    @discardableResult
    func raw(_ line: String) throws -> [String: JSONValue] {
        try client.sendLine(Array(line.utf8))
        while true {
            let response = try read()
            if response["ok"] != nil {
                coverage.recordResponse(command: nil, arguments: [], response: response)
                return response
            }
            held.append(response)
        }
    }

    /// The next event or resolver line: held ones first.
    func nextStreamLine() throws -> [String: JSONValue] {
        if !held.isEmpty { return held.removeFirst() }
        return try read()
    }

    /// Reads until the agent closes the connection, recording every line; false if it did not
    /// close within the client's receive timeout.
    func readUntilClosed() -> Bool {
        while true {
            do { _ = try read() } catch AdminSocketClient.ClientError.closed { return true } catch { return false }
        }
    }

    private func read() throws -> [String: JSONValue] {
        let line = try client.readObject()
        coverage.recordStreamLine(line)
        return line
    }
}

/// The error code of a failed response.
func errorCode(of response: [String: JSONValue]) -> String? {
    guard case .string(let code)? = response["error"]?.objectValue?["code"] else { return nil }
    return code
}
