import CSodium

/// The one place CanopyCrypto touches libsodium's global state, plus thin, checked wrappers over
/// the primitives the handshake and the channel use.
///
/// Every public entry point of this module that calls libsodium first calls
/// `Sodium.ensureInitialized()`. `sodium_init` is itself idempotent and thread-safe; the static
/// `let` below (initialised once by the Swift runtime, under its own lock) only avoids re-entering
/// libsodium's mutex on every call and turns a failure into a single, clear crash: without a
/// working RNG no key this module makes would be safe.
public enum Sodium {
    private static let initialized: Bool = {
        let status = sodium_init()
        precondition(status >= 0, "sodium_init failed: libsodium cannot run on this system")
        return true
    }()

    /// Initialises libsodium once per process. Cheap after the first call.
    public static func ensureInitialized() {
        precondition(initialized)
    }

    /// BLAKE2b with a `count`-byte output over the concatenation of `parts`, keyed when `key` is
    /// given (then it is a PRF/MAC, as libsodium documents for `crypto_generichash`).
    static func blake2b(_ parts: [ArraySlice<UInt8>], key: [UInt8]? = nil, count: Int = 32) -> [UInt8] {
        ensureInitialized()
        // crypto_generichash_state is 64-byte aligned in C, so Swift sees it as opaque.
        let raw = UnsafeMutableRawPointer.allocate(
            byteCount: crypto_generichash_statebytes(), alignment: 64)
        defer { raw.deallocate() }
        let state = OpaquePointer(raw)
        let keyStatus: Int32
        if let key {
            keyStatus = key.withUnsafeBufferPointer {
                crypto_generichash_init(state, $0.baseAddress, $0.count, count)
            }
        } else {
            keyStatus = crypto_generichash_init(state, nil, 0, count)
        }
        precondition(keyStatus == 0, "crypto_generichash_init rejected a valid size")
        for part in parts {
            part.withUnsafeBufferPointer {
                _ = crypto_generichash_update(state, $0.baseAddress, UInt64($0.count))
            }
        }
        var out = [UInt8](repeating: 0, count: count)
        precondition(crypto_generichash_final(state, &out, count) == 0)
        return out
    }

    /// `crypto_kdf_derive_from_key`: a 32-byte subkey `id` of `key` under an 8-byte ASCII context.
    static func deriveKey(from key: [UInt8], id: UInt64, context: StaticString) -> [UInt8] {
        ensureInitialized()
        precondition(key.count == 32 && context.utf8CodeUnitCount == 8, "KDF sizes are fixed")
        var out = [UInt8](repeating: 0, count: 32)
        let status = context.withUTF8Buffer { ctx in
            ctx.withMemoryRebound(to: CChar.self) { ctxChars in
                crypto_kdf_derive_from_key(&out, 32, id, ctxChars.baseAddress!, key)
            }
        }
        precondition(status == 0, "crypto_kdf_derive_from_key rejected valid sizes")
        return out
    }

    /// X25519 of `secret` and `point`; nil when the result is all zero, which is what a
    /// small-order (or otherwise degenerate) point produces. Callers MUST treat nil as fatal.
    static func x25519(secret: [UInt8], point: some Collection<UInt8>) -> [UInt8]? {
        ensureInitialized()
        let pointBytes = Array(point)
        precondition(secret.count == 32 && pointBytes.count == 32)
        var out = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult(&out, secret, pointBytes) == 0 else { return nil }
        return out
    }

    /// The X25519 public key of a 32-byte secret scalar.
    static func x25519Base(secret: [UInt8]) -> [UInt8] {
        ensureInitialized()
        precondition(secret.count == 32)
        var out = [UInt8](repeating: 0, count: 32)
        precondition(crypto_scalarmult_base(&out, secret) == 0, "scalarmult_base failed")
        return out
    }

    /// XChaCha20-Poly1305 (IETF) with the all-zero nonce. Only for keys used exactly once, as the
    /// handshake's k2 and k3 are.
    static func sealOnce(key: [UInt8], additionalData: [UInt8], plaintext: [UInt8]) -> [UInt8] {
        ensureInitialized()
        let nonce = [UInt8](repeating: 0, count: 24)
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        var outCount: UInt64 = 0
        let status = crypto_aead_xchacha20poly1305_ietf_encrypt(
            &out, &outCount, plaintext, UInt64(plaintext.count),
            additionalData, UInt64(additionalData.count), nil, nonce, key)
        precondition(status == 0 && Int(outCount) == out.count)
        return out
    }

    /// Opens what `sealOnce` made; nil when authentication fails.
    static func openOnce(key: [UInt8], additionalData: [UInt8], ciphertext: ArraySlice<UInt8>) -> [UInt8]? {
        ensureInitialized()
        guard ciphertext.count >= 16 else { return nil }
        let nonce = [UInt8](repeating: 0, count: 24)
        var out = [UInt8](repeating: 0, count: ciphertext.count - 16)
        var outCount: UInt64 = 0
        let status = ciphertext.withUnsafeBufferPointer { c in
            crypto_aead_xchacha20poly1305_ietf_decrypt(
                &out, &outCount, nil, c.baseAddress!, UInt64(c.count),
                additionalData, UInt64(additionalData.count), nonce, key)
        }
        return status == 0 ? out : nil
    }

    /// Constant-time equality of two 32-byte values (`crypto_verify_32`).
    static func equal32(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        let x = Array(a)
        let y = Array(b)
        guard x.count == 32, y.count == 32 else { return false }
        return crypto_verify_32(x, y) == 0
    }

    /// Overwrites `bytes` with zeros in a way the optimiser may not remove.
    static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { sodium_memzero($0.baseAddress, $0.count) }
    }
}
