import ArgumentParser
import CSodium
import CanopyCrypto
import CanopyWire
import Foundation

/// `canopy-bench wire`: the cost of Canopy's secure channel and handshake, each beside its
/// ceiling measured in the same run.
///
/// - Channel: one message per frame, through the whole path a replicator uses (message encode →
///   fragment → seal with length prefix → frame decode → open → reassemble → message decode),
///   against raw `crypto_secretstream_xchacha20poly1305` push + pull of the same plaintext size.
///   Both run on one thread and count plaintext bytes, so the ratio is the framing overhead.
/// - Handshake: complete handshakes per second between two `SecureChannel` ends over loopback
///   TCP, a new connection each, with `--pairs` client and server threads running concurrently.
struct WireBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wire", abstract: "Encrypted frames/s and MB/s against raw secretstream; handshakes/s over loopback.")

    @Option(help: "Seconds per throughput round.")
    var seconds: Double = 0.25

    @Option(help: "Alternating rounds of raw and Canopy throughput; the best of each is reported.")
    var rounds: Int = 12

    @Flag(help: "Measure only the handshakes.")
    var handshakesOnly = false

    @Option(help: "Handshakes to complete over loopback TCP.")
    var handshakes: Int = 20_000

    /// One pair per core. The two ends of a handshake take turns, so a third pair might seem to
    /// fill the gaps; measured on two cores it makes no difference (Tools/canopy-bench/README.md).
    @Option(help: "Concurrent client/server thread pairs for the handshake measurement.")
    var pairs: Int = 2

    func run() throws {
        Sodium.ensureInitialized()
        if !handshakesOnly { try measureChannel() }
        let cost = HandshakeBench.primitiveMicroseconds()
        let perHandshake = 2 * cost.perSide
        print(String(
            format: "per side (µs, fastest of 30 batches): Ed25519 sign %.1f, verify %.1f (libsodium); X25519 %.1f, keygen %.1f"
                + " (EphemeralKey; libsodium's ladder: %.1f, %.1f)"
                + " → %.0f µs per handshake (both sides) = ceiling %.0f handshakes/s per core",
            cost.sign, cost.verify, cost.dh, cost.keygen, cost.libsodiumDH, cost.libsodiumKeygen,
            perHandshake, 1e6 / perHandshake))
        let memory = try HandshakeBench.inMemory(seconds: seconds * Double(rounds))
        print(String(format: "handshakes in memory, one thread running both sides: %.0f handshakes/s", memory))
        let rate = try HandshakeBench.run(handshakes: handshakes, pairs: pairs)
        print(String(
            format: "handshakes over loopback TCP: %d in %.3f s = %.0f handshakes/s (%d thread pairs)",
            rate.completed, rate.seconds, Double(rate.completed) / rate.seconds, pairs))
        let cpuPerHandshake = rate.cpuSeconds / Double(rate.completed)
        print(String(
            format: "  CPU (this process, both ends, kernel included): %.0f µs per handshake"
                + " = %.0f handshakes/s per core, %.0f on 2 cores with nothing else running",
            cpuPerHandshake * 1e6, 1 / cpuPerHandshake, 2 / cpuPerHandshake))
    }

    /// Alternates raw and Canopy rounds per frame size and prints the best of each.
    func measureChannel() throws {
        print("best of \(rounds) alternating rounds of \(seconds) s each (damps load from other processes);")
        print("'% of raw' is the median over rounds of Canopy / raw measured back to back")
        print("frame plaintext | raw secretstream MB/s | Canopy path MB/s | frames/s | % of raw")
        for size in [1024, 64 * 1024] {
            var raw = Throughput(frames: 0, bytes: 0, seconds: 1)
            var path = raw
            var ratios: [Double] = []
            for _ in 0..<rounds {
                let rawRound = Self.rawSecretstream(plaintextBytes: size, seconds: seconds)
                let pathRound = try Self.channelPath(plaintextBytes: size, seconds: seconds)
                if rawRound.megabytesPerSecond > raw.megabytesPerSecond { raw = rawRound }
                if pathRound.megabytesPerSecond > path.megabytesPerSecond { path = pathRound }
                ratios.append(pathRound.megabytesPerSecond / rawRound.megabytesPerSecond)
            }
            print(String(
                format: "%6d B        | %10.1f            | %10.1f       | %9.0f | %5.1f %%",
                size, raw.megabytesPerSecond, path.megabytesPerSecond, path.framesPerSecond,
                100 * ratios.sorted()[ratios.count / 2]))
        }
    }

    /// A throughput figure.
    struct Throughput {
        var frames: Int
        var bytes: Int
        var seconds: Double
        var megabytesPerSecond: Double { Double(bytes) / seconds / 1_000_000 }
        var framesPerSecond: Double { Double(frames) / seconds }
    }

    /// Runs `body` in batches until `seconds` have passed; `body` returns plaintext bytes moved.
    static func measure(seconds: Double, batch: Int, _ body: () throws -> Int) rethrows -> Throughput {
        let clock = ContinuousClock()
        let start = clock.now
        var frames = 0
        var bytes = 0
        var elapsed = 0.0
        while elapsed < seconds {
            for _ in 0..<batch { bytes += try body() }
            frames += batch
            let duration = clock.now - start
            elapsed = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
        return Throughput(frames: frames, bytes: bytes, seconds: elapsed)
    }

    /// The ceiling: push then pull the same plaintext with libsodium, reusing every buffer.
    static func rawSecretstream(plaintextBytes: Int, seconds: Double) -> Throughput {
        var key = [UInt8](repeating: 0, count: 32)
        crypto_secretstream_xchacha20poly1305_keygen(&key)
        var push = crypto_secretstream_xchacha20poly1305_state()
        var pull = crypto_secretstream_xchacha20poly1305_state()
        var header = [UInt8](repeating: 0, count: WireLimits.secretstreamHeaderBytes)
        crypto_secretstream_xchacha20poly1305_init_push(&push, &header, key)
        crypto_secretstream_xchacha20poly1305_init_pull(&pull, header, key)
        let plaintext = [UInt8](repeating: 0x42, count: plaintextBytes)
        var ciphertext = [UInt8](repeating: 0, count: plaintextBytes + WireLimits.secretstreamOverheadBytes)
        var opened = [UInt8](repeating: 0, count: plaintextBytes)
        let ad: [UInt8] = [0, 0, 0, 0]
        return measure(seconds: seconds, batch: 64) {
            var tag: UInt8 = 0
            let pushed = crypto_secretstream_xchacha20poly1305_push(
                &push, &ciphertext, nil, plaintext, UInt64(plaintextBytes), ad, 4, 0)
            let pulled = crypto_secretstream_xchacha20poly1305_pull(
                &pull, &opened, nil, &tag, ciphertext, UInt64(ciphertext.count), ad, 4)
            precondition(pushed == 0 && pulled == 0, "raw secretstream failed")
            return plaintextBytes
        }
    }

    /// Canopy's path for one `checkpoint` message whose frame plaintext is `plaintextBytes` long.
    static func channelPath(plaintextBytes: Int, seconds: Double) throws -> Throughput {
        let message = Message.checkpoint(Checkpoint(requestID: 1, value: checkpointValue(plaintextBytes: plaintextBytes)))
        let (sender, receiver) = try ChannelPair.make()
        var alice = sender
        var bob = receiver
        _ = try bob.receive(try alice.seal([]))  // headers out of the way
        var assembler = MessageAssembler()
        var check = true  // compare the whole message once; after that only its size
        return try measure(seconds: seconds, batch: 16) {
            let plaintexts = MessageFragmenter.plaintexts(of: message.encoded())
            precondition(plaintexts.count == 1 && plaintexts[0].count == plaintextBytes)
            let events = try bob.receive(try alice.seal(plaintexts[0]))
            guard case .message(let plaintext) = events.first,
                case .message(let bytes) = assembler.append(plaintext: plaintext),
                case .checkpoint(let decoded) = try Message.decode(bytes),
                decoded.value?.count == plaintextBytes - 1 - (bytes.count - (decoded.value?.count ?? 0)),
                !check || Message.checkpoint(decoded) == message
            else { fatalError("the channel path lost the message") }
            check = false
            return plaintextBytes
        }
    }

    /// A checkpoint value length that makes the message's frame plaintext exactly `plaintextBytes`.
    static func checkpointValue(plaintextBytes: Int) -> [UInt8] {
        var valueBytes = plaintextBytes
        while true {
            let message = Message.checkpoint(Checkpoint(requestID: 1, value: [UInt8](repeating: 7, count: valueBytes)))
            let plaintext = 1 + message.encoded().count
            if plaintext == plaintextBytes { return [UInt8](repeating: 7, count: valueBytes) }
            valueBytes -= plaintext - plaintextBytes
        }
    }
}

/// Two ends of an in-memory connection after a real handshake.
enum ChannelPair {
    static func make() throws -> (SecureChannel, SecureChannel) {
        var random = SystemEntropy()
        return try make(Identity.generate(random: &random), Identity.generate(random: &random))
    }

    static func make(_ alice: Identity, _ bob: Identity) throws -> (SecureChannel, SecureChannel) {
        var random = SystemEntropy()
        var initiator = HandshakeInitiator(
            configuration: HandshakeConfiguration(identity: alice, authorizer: AllowList([bob.nodeID]), pendingPeers: nil, remoteAddress: "memory"),
            now: .zero, random: &random)
        var responder = HandshakeResponder(
            configuration: HandshakeConfiguration(identity: bob, authorizer: AllowList([alice.nodeID]), pendingPeers: nil, remoteAddress: "memory"),
            now: .zero, random: &random)
        let message2 = HandshakeBench.sent(responder.receive(HandshakeBench.sent(initiator.start()), now: .zero))
        let afterMessage2 = initiator.receive(message2, now: .zero)
        let afterMessage3 = responder.receive(HandshakeBench.sent(afterMessage2), now: .zero)
        guard let aliceSession = HandshakeBench.session(afterMessage2), let bobSession = HandshakeBench.session(afterMessage3)
        else { throw ValidationError("in-memory handshake failed") }
        return (SecureChannel(session: aliceSession, random: &random), SecureChannel(session: bobSession, random: &random))
    }
}
