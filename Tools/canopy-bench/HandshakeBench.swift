import CSodium
import CanopyCrypto
import Foundation
import Glibc

/// Handshakes per second over loopback TCP: `pairs` client threads dial a listener served by
/// `pairs` server threads; each connection runs the full handshake, the responder then sends a
/// FINAL frame and the initiator waits to open it, so both ends have finished when it counts.
enum HandshakeBench {
    /// Bytes of the `.send` actions.
    static func sent(_ actions: [HandshakeAction]) -> [UInt8] {
        actions.reduce(into: []) { if case .send(let bytes) = $1 { $0 += bytes } }
    }

    /// The session of an `.established` action, if any.
    static func session(_ actions: [HandshakeAction]) -> EstablishedSession? {
        for case .established(let session) in actions { return session }
        return nil
    }

    /// Microseconds of one public-key operation, as the handshake runs it (Ed25519 through
    /// libsodium, X25519 through `EphemeralKey`), beside libsodium's own X25519 for the record.
    struct PrimitiveCost {
        var sign: Double
        var verify: Double
        var dh: Double
        var keygen: Double
        var libsodiumDH: Double
        var libsodiumKeygen: Double

        /// What one handshake needs on each side: one of each of the first four.
        var perSide: Double { sign + verify + dh + keygen }
    }

    /// The ceiling: each operation timed in this run, as the fastest of `batches` batches of
    /// `iterations`. The fastest, not the median: other processes may share the cores, and
    /// a batch can only be slowed by them, so the fastest is the closest to the operation's cost.
    static func primitiveMicroseconds(iterations: Int = 100, batches: Int = 30) -> PrimitiveCost {
        var publicKey = [UInt8](repeating: 0, count: 32)
        var secretKey = [UInt8](repeating: 0, count: 64)
        crypto_sign_keypair(&publicKey, &secretKey)
        var signature = [UInt8](repeating: 0, count: 64)
        let message = [UInt8](repeating: 1, count: 60)
        var random = SystemEntropy()
        let scalar = random.bytes(32)
        let key = EphemeralKey(random: &random)
        let point = EphemeralKey(random: &random).publicKey
        var out = [UInt8](repeating: 0, count: 32)
        func time(_ body: () -> Bool) -> Double {
            let clock = ContinuousClock()
            var perOperation: [Double] = []
            for _ in 0..<batches {
                let start = clock.now
                for _ in 0..<iterations { precondition(body()) }
                let duration = clock.now - start
                let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
                perOperation.append(seconds * 1e6 / Double(iterations))
            }
            return perOperation.min()!
        }
        return PrimitiveCost(
            sign: time { crypto_sign_detached(&signature, nil, message, UInt64(message.count), secretKey) == 0 },
            verify: time { crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0 },
            dh: time { key.sharedSecret(with: point) != nil },
            keygen: time {
                var secret = scalar
                return EphemeralKey(secret: &secret).publicKey.count == 32
            },
            libsodiumDH: time { crypto_scalarmult(&out, scalar, point) == 0 },
            libsodiumKeygen: time { crypto_scalarmult_base(&out, scalar) == 0 })
    }

    /// Complete handshakes per second with both sides on this thread and no I/O: the CPU cost.
    static func inMemory(seconds: Double) throws -> Double {
        var random = SystemEntropy()
        let alice = Identity.generate(random: &random)
        let bob = Identity.generate(random: &random)
        var count = 0
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < .milliseconds(Int(seconds * 1000)) {
            _ = try ChannelPair.make(alice, bob)
            count += 1
        }
        let duration = clock.now - start
        return Double(count) / (Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    /// Seconds of CPU (user + system) this process has used so far.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        precondition(getrusage(RUSAGE_SELF.rawValue, &usage) == 0)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// Wall seconds, completed handshakes, and the CPU seconds the process used meanwhile (both
    /// ends, kernel included): CPU per handshake stays meaningful when other processes share
    /// the cores and the wall rate does not.
    static func run(handshakes: Int, pairs: Int) throws -> (seconds: Double, completed: Int, cpuSeconds: Double) {
        var random = SystemEntropy()
        let client = Identity.generate(random: &random)
        let server = Identity.generate(random: &random)
        let (listener, address) = try listen()
        defer { close(listener) }
        let perPair = handshakes / pairs
        let group = DispatchGroup()
        let clock = ContinuousClock()
        let start = clock.now
        let cpuStart = processCPUSeconds()
        for _ in 0..<pairs {
            spawn(group) { for _ in 0..<perPair { serve(listener: listener, identity: server, allowed: client) } }
            spawn(group) { for _ in 0..<perPair { dial(address: address, identity: client, allowed: server) } }
        }
        group.wait()
        let duration = clock.now - start
        return (
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18, perPair * pairs,
            processCPUSeconds() - cpuStart)
    }

    /// Runs `body` on a new thread (blocking socket calls do not belong on Dispatch's pool).
    private static func spawn(_ group: DispatchGroup, _ body: @escaping @Sendable () -> Void) {
        group.enter()
        let thread = Thread {
            body()
            group.leave()
        }
        thread.start()
    }

    private static func configuration(_ identity: Identity, allowing peer: Identity) -> HandshakeConfiguration {
        HandshakeConfiguration(identity: identity, authorizer: AllowList([peer.nodeID]), pendingPeers: nil, remoteAddress: "127.0.0.1")
    }

    private static func serve(listener: Int32, identity: Identity, allowed: Identity) {
        let fd = accept(listener, nil, nil)
        precondition(fd >= 0, "accept failed: \(errno)")
        defer { close(fd) }
        var random = SystemEntropy()
        var responder = HandshakeResponder(configuration: configuration(identity, allowing: allowed), now: .zero, random: &random)
        var result: EstablishedSession?
        while result == nil {
            let actions = responder.receive(readSome(fd), now: .zero)
            writeAll(fd, sent(actions))
            for case .fail(let error) in actions { fatalError("responder failed: \(error)") }
            result = session(actions)
        }
        var channel = SecureChannel(session: result!, random: &random)
        writeAll(fd, try! channel.seal([], final: true))
    }

    private static func dial(address: sockaddr_in, identity: Identity, allowed: Identity) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var target = address
        let status = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(status == 0, "connect failed: \(errno)")
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var random = SystemEntropy()
        var initiator = HandshakeInitiator(configuration: configuration(identity, allowing: allowed), now: .zero, random: &random)
        writeAll(fd, sent(initiator.start()))
        var result: EstablishedSession?
        while result == nil {
            let actions = initiator.receive(readSome(fd), now: .zero)
            writeAll(fd, sent(actions))
            for case .fail(let error) in actions { fatalError("initiator failed: \(error)") }
            result = session(actions)
        }
        var channel = SecureChannel(session: result!, random: &random)
        var finished = false
        while !finished {
            let bytes = readSome(fd)
            precondition(!bytes.isEmpty, "server closed before its FINAL frame")
            finished = (try! channel.receive(bytes)).contains(.finished)
        }
    }

    private static func listen() throws -> (Int32, sockaddr_in) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && Glibc.listen(fd, 1024) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        precondition(ok, "cannot listen on loopback: \(errno)")
        return (fd, address)
    }

    private static func readSome(_ fd: Int32) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if count < 0 && errno == EINTR { continue }
            precondition(count >= 0, "read failed: \(errno)")
            return Array(buffer[0..<count])
        }
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            precondition(count > 0, "write failed: \(errno)")
            written += count
        }
    }
}
