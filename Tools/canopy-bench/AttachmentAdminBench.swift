import ArgumentParser
import CSodium
import CanopyAdmin
import CanopyAgent
import CanopyCore
import CanopyCrypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `attachment-admin`: one large attachment through a real `canopyd`'s admin socket, as
/// `canopyctl attach` and `canopyctl attachment` move it: the rate of each direction beside a
/// file-to-file copy of the same bytes on the same disk (read, write, fsync: what the agent has to
/// do at least), and how far the agent's peak resident memory rises above its idle peak while the
/// content streams (a part at a time, never whole).
struct AttachmentAdminBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment-admin",
        abstract: "One large attachment uploaded and downloaded through canopyd's admin socket: MB/s beside a disk copy, and the agent's peak RSS above idle.")

    @OptionGroup var agents: AgentBenchOptions

    @Option(help: "MiB of content.")
    var mebibytes = 1024

    @Flag(help: "Print the figures as JSON.")
    var json = false

    func run() throws {
        Sodium.ensureInitialized()
        let (base, remove) = agents.temporaryDirectory()
        defer { remove() }
        let total = mebibytes << 20
        var block = [UInt8](repeating: 0, count: 1 << 20)
        randombytes_buf(&block, block.count)
        let source = base + "/source.bin"
        try AttachmentStorageBench.writeFile(source, block, repeated: mebibytes, hashing: false)
        let copy = try AttachmentStorageBench.time { try Self.copy(source, to: base + "/copy.bin") }
        try FileManager.default.removeItem(atPath: base + "/copy.bin")

        let agent = try BenchAgent(name: "a", parent: base, canopyd: try agents.canopydPath())
        try agent.start()
        defer { agent.stop() }
        let idle = try agent.peakResidentBytes()
        let client = try agent.client()

        let input = open(source, O_RDONLY)
        guard input >= 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "open") }
        defer { close(input) }
        var uploaded: Admin.Attach.Reply?
        let upload = try AttachmentStorageBench.time {
            uploaded = try BenchAgent.checked(
                client.upload(Admin.Attach(doc: "big", name: "content", length: Int64(total))) { buffer in
                    read(input, buffer.baseAddress, buffer.count)
                })
        }
        let afterUpload = try agent.peakResidentBytes()

        let output = base + "/download.bin"
        let target = open(output, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard target >= 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "open") }
        var received = 0
        let download = try AttachmentStorageBench.time {
            _ = try BenchAgent.checked(client.download(Admin.GetAttachment(doc: "big", name: "content")) { part in
                let written = part.withUnsafeBytes { write(target, $0.baseAddress, $0.count) }
                guard written == part.count else { throw AttachmentStorageBench.SystemCallFailed(call: "write") }
                received += written
            })
            guard fsync(target) == 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "fsync") }
        }
        close(target)
        let afterDownload = try agent.peakResidentBytes()
        guard received == total, let digest = uploaded?.digest,
            digest == AttachmentDigest.prefix + (try AttachmentStorageBench.readFile(output, hashing: true))
        else { throw ValidationError("the content downloaded is not the content uploaded") }

        let mib = { (bytes: Int) in Double(bytes) / Double(1 << 20) }
        FigureReport.print([
            AttachmentStorageBench.figure("admin upload (attach) of \(mebibytes) MiB", total, upload, ceiling: copy, ceilingName: "disk copy"),
            AttachmentStorageBench.figure("admin download (attachment) of \(mebibytes) MiB", total, download, ceiling: copy, ceilingName: "disk copy"),
            Figure(
                name: "agent peak RSS above idle after the upload", value: mib(afterUpload - idle), unit: "MiB", ceiling: 16,
                ceilingName: "target", note: "idle peak \(String(format: "%.1f", mib(idle))) MiB"),
            Figure(name: "agent peak RSS above idle after the download", value: mib(afterDownload - idle), unit: "MiB", ceiling: 16, ceilingName: "target"),
        ], json: json)
    }

    /// Copies `source` to a new file at `path` in 1 MiB blocks and syncs it.
    static func copy(_ source: String, to path: String) throws {
        let input = open(source, O_RDONLY)
        let output = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer {
            close(input)
            close(output)
        }
        guard input >= 0, output >= 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "open") }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            guard count >= 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "read") }
            if count == 0 { break }
            guard buffer.withUnsafeBytes({ write(output, $0.baseAddress, count) }) == count else {
                throw AttachmentStorageBench.SystemCallFailed(call: "write")
            }
        }
        guard fsync(output) == 0 else { throw AttachmentStorageBench.SystemCallFailed(call: "fsync") }
    }
}
