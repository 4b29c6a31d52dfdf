import CSodium

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// BLAKE2b hashing (libsodium's `crypto_generichash`): computation only, no I/O.
package enum Blake2b {
    /// The unkeyed BLAKE2b digest of `input`, `outputBytes` long (16...64).
    public static func hash(_ input: [UInt8], outputBytes: Int = 32) -> [UInt8] {
        precondition((16...64).contains(outputBytes), "BLAKE2b output must be 16...64 bytes")
        var digest = [UInt8](repeating: 0, count: outputBytes)
        let status = crypto_generichash(&digest, outputBytes, input, UInt64(input.count), nil, 0)
        precondition(status == 0, "crypto_generichash failed with valid sizes")
        return digest
    }

    /// The unkeyed 16-byte BLAKE2b digest of `first` followed by `second`, as two big-endian
    /// halves: the same digest as `hash(first + second, outputBytes: 16)`, without building the
    /// concatenation or any array (the state lives on the stack).
    public static func digest16(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> (high: UInt64, low: UInt64) {
        // A constant size and the default alignment: Swift puts a temporary allocation on the stack
        // only then (a size from `crypto_generichash_statebytes()`, or a 64-byte alignment, makes
        // every call a posix_memalign and a free, ≈ 2% of a receiving agent's CPU). The state wants
        // 64-byte alignment, so it starts at the first multiple of 64 in the buffer.
        precondition(stateFits, "libsodium's BLAKE2b state is larger than Blake2b.stateBytes")
        return withUnsafeTemporaryAllocation(byteCount: stateBytes + 64, alignment: 16) { raw in
            let address = (UInt(bitPattern: raw.baseAddress!) + 63) & ~UInt(63)
            let state = OpaquePointer(bitPattern: address)!
            precondition(crypto_generichash_init(state, nil, 0, 16) == 0, "crypto_generichash_init rejected a valid size")
            update(state, first)
            update(state, second)
            var halves: (UInt64, UInt64) = (0, 0)
            withUnsafeMutableBytes(of: &halves) { out in
                precondition(crypto_generichash_final(state, out.baseAddress!.assumingMemoryBound(to: UInt8.self), 16) == 0)
            }
            return (UInt64(bigEndian: halves.0), UInt64(bigEndian: halves.1))
        }
    }

    /// The unkeyed 32-byte BLAKE2b digest of the parts `feed` hands to its argument, in order,
    /// as four big-endian words; like `digest16`, with the state on the stack and no array.
    public static func digest32(_ feed: (_ update: (UnsafeRawBufferPointer) -> Void) -> Void) -> (UInt64, UInt64, UInt64, UInt64) {
        precondition(stateFits, "libsodium's BLAKE2b state is larger than Blake2b.stateBytes")
        return withUnsafeTemporaryAllocation(byteCount: stateBytes + 64, alignment: 16) { raw in
            let address = (UInt(bitPattern: raw.baseAddress!) + 63) & ~UInt(63)
            let state = OpaquePointer(bitPattern: address)!
            precondition(crypto_generichash_init(state, nil, 0, 32) == 0, "crypto_generichash_init rejected a valid size")
            feed { update(state, $0) }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { out in
                precondition(crypto_generichash_final(state, out.baseAddress!.assumingMemoryBound(to: UInt8.self), 32) == 0)
            }
            return (UInt64(bigEndian: words.0), UInt64(bigEndian: words.1), UInt64(bigEndian: words.2), UInt64(bigEndian: words.3))
        }
    }

    /// The room `digest16` gives the state: `sizeof(crypto_generichash_state)` in libsodium
    /// (384 bytes, 64-byte aligned). A constant, so that `digest16`'s allocation (64 bytes more,
    /// to align it) stays on the stack.
    static let stateBytes = 384

    /// Whether the linked libsodium's state fits in `stateBytes` (checked once, before any hash).
    static let stateFits = crypto_generichash_statebytes() <= stateBytes

    private static func update(_ state: OpaquePointer, _ part: UnsafeRawBufferPointer) {
        guard let base = part.baseAddress, part.count > 0 else { return }
        _ = crypto_generichash_update(state, base.assumingMemoryBound(to: UInt8.self), UInt64(part.count))
    }
}

/// BLAKE2b over content that arrives in parts (an attachment streamed from disk or the
/// network): `update` with each part, then `finish` once. The state is allocated once, 64-byte
/// aligned as libsodium wants it.
package final class Blake2bStream {
    private let state: OpaquePointer
    private let outputBytes: Int
    private var finished = false

    /// A stream whose digest is `outputBytes` long (16...64).
    package init(outputBytes: Int = 32) {
        precondition((16...64).contains(outputBytes), "BLAKE2b output must be 16...64 bytes")
        var memory: UnsafeMutableRawPointer?
        precondition(posix_memalign(&memory, 64, crypto_generichash_statebytes()) == 0, "out of memory for a BLAKE2b state")
        state = OpaquePointer(memory!)
        self.outputBytes = outputBytes
        precondition(crypto_generichash_init(state, nil, 0, outputBytes) == 0, "crypto_generichash_init rejected a valid size")
    }

    deinit { free(UnsafeMutableRawPointer(state)) }

    /// Adds `bytes` to the content hashed.
    package func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(!finished, "update after finish")
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        _ = crypto_generichash_update(state, base.assumingMemoryBound(to: UInt8.self), UInt64(bytes.count))
    }

    /// Adds `bytes` to the content hashed.
    package func update(_ bytes: some Collection<UInt8>) {
        if bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) == nil {
            Array(bytes).withUnsafeBytes { update($0) }
        }
    }

    /// The digest of everything added; the stream takes no more.
    package func finish() -> [UInt8] {
        precondition(!finished, "finish called twice")
        finished = true
        var digest = [UInt8](repeating: 0, count: outputBytes)
        precondition(crypto_generichash_final(state, &digest, outputBytes) == 0, "crypto_generichash_final failed")
        return digest
    }
}
