// Compiled into every fuzz target (not part of the package build). When Tools/fuzz/run starts a
// target with CANOPY_FUZZ_SEED_ROOT and CANOPY_FUZZ_SEED_CORPUS set, libFuzzer's initialisation
// hook writes the seed corpora from Protocol/vectors and exits instead of fuzzing:
//
// handshake-responder/: one honest input per mode, from vectors/handshake.json.
// message-decoder/: every valid and invalid message vector, raw.
// frame-decoder/: every frame vector's stream, and every message vector framed as the secure
// channel frames it (flags byte, 17 stand-in MAC bytes, fragments of 16 bytes), each prefixed by
// the read-size byte the frame-decoder target expects.
// state-machine/: the example exchange as one conversation, and each valid message alone.
// channel-mux/: the version-2 example exchange as node B plays it, and each version-2 vector
// after B's hello.
import CanopyWire
import Foundation

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    let environment = ProcessInfo.processInfo.environment
    guard let root = environment["CANOPY_FUZZ_SEED_ROOT"], let corpus = environment["CANOPY_FUZZ_SEED_CORPUS"] else {
        return 0
    }
    let count = FuzzSeeds(root: root, corpus: corpus).writeAll()
    print("seeds: wrote \(count) files into \(corpus)")
    exit(0)
}

/// Turns the JSON vectors into seed files.
struct FuzzSeeds {
    let root: String
    let corpus: String

    func writeAll() -> Int {
        var count = 0
        let messages = load("Protocol/vectors/messages.json")
        for key in ["valid", "invalid"] {
            for vector in messages[key] as? [[String: String]] ?? [] {
                guard let name = vector["name"], let hex = vector["hex"] else { continue }
                let message = bytes(hex: hex)
                write(message, "message-decoder", name)
                var stream: [UInt8] = [7]
                for plaintext in MessageFragmenter.plaintexts(of: message, fragmentBytesMax: 16) {
                    FrameEncoder.encode(ciphertext: plaintext + [UInt8](repeating: 0, count: 17), into: &stream)
                }
                write(stream, "frame-decoder", "framed-" + name)
                count += 2
            }
        }
        // state-machine/: the example exchange's messages from A, in order, as length-prefixed
        // records (A's hello is implied by the target), and each other valid vector alone.
        let valid = messages["valid"] as? [[String: String]] ?? []
        var conversation: [UInt8] = []
        for vector in valid where vector["name"]?.hasPrefix("example-") == true {
            guard let hex = vector["hex"], let type = vector["type"], type != "hello" else { continue }
            if ["checkpoint", "changes", "revisions", "checkpointSetAck"].contains(type) {
                conversation += record(bytes(hex: hex))
            }
        }
        write(conversation, "state-machine", "example-conversation")
        for vector in valid {
            guard let name = vector["name"], let hex = vector["hex"] else { continue }
            write(record(bytes(hex: hex)), "state-machine", name)
        }
        count += 1 + valid.count
        count += writeChannelMuxSeeds()
        let frames = load("Protocol/vectors/frames.json")
        for key in ["valid", "invalid"] {
            for vector in frames[key] as? [[String: Any]] ?? [] {
                guard let name = vector["name"] as? String, let stream = vector["stream"] as? String else { continue }
                write([3] + bytes(hex: stream), "frame-decoder", name)
                count += 1
            }
        }
        // handshake-responder/: one honest input per mode (see the target), from the handshake
        // vector, whose keys and entropy are the target's.
        let handshake = load("Protocol/vectors/handshake.json")
        let field = { (name: String) in bytes(hex: handshake[name] as? String ?? "") }
        let firstFrame = field("initiatorFirstOutput")
        write([0, 255] + field("message1"), "handshake-responder", "mode0-message1")
        write([1, 255] + field("message3") + firstFrame, "handshake-responder", "mode1-message3-frame")
        write([2, 255] + [UInt8](repeating: 0, count: 112) + firstFrame, "handshake-responder", "mode2-unchanged")
        write([3, 7, 0xFF, 0xFF, 5] + Array("hello".utf8) + [0], "handshake-responder", "mode3-unchanged")
        count += 4
        return count
    }

    /// channel-mux/: node B's side of the version-2 example exchange against a mux that is node A
    /// (it opens `notes` and `photos` first), and each version-2 vector alone after B's hello.
    private func writeChannelMuxSeeds() -> Int {
        let vectors = load("Protocol/vectors/messages-v2.json")
        var valid: [String: [UInt8]] = [:]
        for vector in vectors["valid"] as? [[String: String]] ?? [] {
            if let name = vector["name"], let hex = vector["hex"] { valid[name] = bytes(hex: hex) }
        }
        let fromB = ["example-accept-notes", "example-refuse-photos", "example-channel-hello-b",
                     "example-channel-checkpoint-get", "example-channel-close", "example-detach-notes", "example-close"]
        let hello = [0] + record(valid["example-hello-b"] ?? [])
        var conversation: [UInt8] = [0xFE] + hello + [1, 0, 1, 1]
        for name in fromB { conversation += [0] + record(valid[name] ?? []) }
        write(conversation, "channel-mux", "example-conversation")
        var count = 1
        for key in ["valid", "invalid"] {
            for vector in vectors[key] as? [[String: String]] ?? [] {
                guard let name = vector["name"], let hex = vector["hex"] else { continue }
                write([0xFE] + hello + [1, 0] + [0] + record(bytes(hex: hex)), "channel-mux", name)
                count += 1
            }
        }
        return count
    }

    /// `u16 big-endian length ‖ bytes`, the state-machine target's record.
    private func record(_ message: [UInt8]) -> [UInt8] {
        [UInt8(message.count >> 8 & 0xFF), UInt8(message.count & 0xFF)] + message
    }

    private func load(_ relative: String) -> [String: Any] {
        guard let data = FileManager.default.contents(atPath: root + "/" + relative),
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { fatalError("cannot read \(relative)") }
        return object
    }

    private func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count - 1, by: 2).compactMap {
            UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16)
        }
    }

    private func write(_ bytes: [UInt8], _ directory: String, _ name: String) {
        let path = corpus + "/" + directory
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path + "/seed-" + name, contents: Data(bytes)) else {
            fatalError("cannot write seed \(name) into \(path)")
        }
    }
}
