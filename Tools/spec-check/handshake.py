#!/usr/bin/env python3
"""Recomputes Protocol/vectors/handshake.json from the text of Protocol/replication-v1.md §4-§5
alone, calling libsodium through ctypes: a second implementation, written from the spec rather
than from the Swift code, so a gap or ambiguity in the spec shows up as a mismatch.

    python3 Tools/spec-check/handshake.py        # prints each value and "ok", exits 1 on a mismatch

The ephemeral secrets and stream headers are taken from the vector (they come from the Swift
DeterministicEntropy, which the spec does not define); everything derived from them is recomputed.
"""
import ctypes
import ctypes.util
import json
import pathlib
import sys

sodium = ctypes.CDLL(ctypes.util.find_library("sodium"))
assert sodium.sodium_init() >= 0
root = pathlib.Path(__file__).resolve().parents[2]
vector = json.loads((root / "Protocol/vectors/handshake.json").read_text())
x = lambda name: bytes.fromhex(vector[name])
buf = ctypes.create_string_buffer


def H(data, key=b""):
    out = buf(32)
    assert sodium.crypto_generichash(out, 32, data, ctypes.c_ulonglong(len(data)), key or None, len(key)) == 0
    return out.raw


def KDF(key, subkey_id, context):
    out = buf(32)
    assert sodium.crypto_kdf_derive_from_key(out, 32, ctypes.c_uint64(subkey_id), context, key) == 0
    return out.raw


def DH(secret, point):
    out = buf(32)
    assert sodium.crypto_scalarmult(out, secret, point) == 0
    return out.raw


def DH_base(secret):
    out = buf(32)
    assert sodium.crypto_scalarmult_base(out, secret) == 0
    return out.raw


def AEAD(key, ad, message):
    out, size = buf(len(message) + 16), ctypes.c_ulonglong()
    assert sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(
        out, ctypes.byref(size), message, ctypes.c_ulonglong(len(message)), ad, ctypes.c_ulonglong(len(ad)),
        None, bytes(24), key) == 0
    return out.raw


def identity(seed):
    public, secret = buf(32), buf(64)
    assert sodium.crypto_sign_seed_keypair(public, secret, seed) == 0
    return public.raw, secret.raw


def Sign(secret, message):
    out = buf(64)
    assert sodium.crypto_sign_detached(out, None, message, ctypes.c_ulonglong(len(message)), secret) == 0
    return out.raw


def first_frame(key, header, plaintext):
    state = buf(52)
    assert sodium.crypto_secretstream_xchacha20poly1305_init_pull(state, header, key) == 0
    length = (len(plaintext) + 17).to_bytes(4, "big")
    out = buf(len(plaintext) + 17)
    assert sodium.crypto_secretstream_xchacha20poly1305_push(
        state, out, None, plaintext, ctypes.c_ulonglong(len(plaintext)), length, ctypes.c_ulonglong(4), 0) == 0
    return header + length + out.raw


PROTO = b"canopy/1 X25519-Ed25519-XChaCha20Poly1305-BLAKE2b"
N = H(b"canopy/1 open network")
pkI, skI = identity(x("initiatorIdentitySeed"))
pkR, skR = identity(x("responderIdentitySeed"))
eI_secret, eR_secret = x("initiatorEphemeralSecret"), x("responderEphemeralSecret")
eI, eR = DH_base(eI_secret), DH_base(eR_secret)

head = b"CNPY" + (1).to_bytes(2, "big") + (0).to_bytes(2, "big") + eI
msg1 = head + H(head, N)
T = H(H(PROTO) + msg1)
tag2 = H(T + eR, N)
T2 = H(T + eR + tag2)
ck = H(T2, DH(eR_secret, eI))
k2, k3 = KDF(ck, 2, b"CNPYhand"), KDF(ck, 3, b"CNPYhand")
C2 = AEAD(k2, T2, pkR + Sign(skR, b"canopy/1 responder signature" + T2))
msg2 = eR + tag2 + C2
T3 = H(T2 + C2)
msg3 = AEAD(k3, T3, pkI + Sign(skI, b"canopy/1 initiator signature" + T3))
T4 = H(T3 + msg3)
s = H(T4, ck)
k_i2r, k_r2i = KDF(s, 1, b"CNPYsess"), KDF(s, 2, b"CNPYsess")
plaintext = x("firstFramePlaintext")
initiator_header = x("initiatorFirstOutput")[:24]
responder_header = x("responderFirstOutput")[:24]

computed = {
    "networkKey": N, "message1": msg1, "message2": msg2, "message3": msg3, "transcriptHash": T4,
    "initiatorToResponderKeyBlake2b": H(k_i2r), "responderToInitiatorKeyBlake2b": H(k_r2i),
    "initiatorFirstOutput": first_frame(k_i2r, initiator_header, plaintext),
    "responderFirstOutput": first_frame(k_r2i, responder_header, plaintext),
}
failed = [name for name, value in computed.items() if value.hex() != vector[name]]
for name in computed:
    print(f"{name:32} {'MISMATCH' if name in failed else 'ok'}")
sys.exit(1 if failed else 0)
