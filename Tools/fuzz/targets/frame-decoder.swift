// fuzz-modules: CanopyCore CanopyWire
// Fuzz target: the TCP byte stream through FrameDecoder and MessageAssembler.
//
// The input is a byte stream of frames. The first input byte picks how the stream is cut into
// reads (1 = byte by byte, up to 255-byte reads), so "need more bytes" paths are exercised as
// well as whole-buffer decoding. Each frame's "ciphertext" minus the 17 MAC bytes stands in for
// the decrypted plaintext (decryption is CanopyCrypto's, fuzzed separately). Invariants checked,
// by trapping: "need more bytes" consumes nothing; a decoded frame respects the length bounds;
// a poisoned decoder stays poisoned; a reassembled message never exceeds messageBytesMax.
import CanopyWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrameDecoder(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let step = max(1, Int(input[0]))
    let stream = input.dropFirst()
    var decoder = FrameDecoder()
    var assembler = MessageAssembler()
    var buffer: ArraySlice<UInt8> = []
    var offset = stream.startIndex
    var decoderFailure: ProtocolError?
    var assemblerFailure: ProtocolError?
    while offset < stream.endIndex, decoderFailure == nil, assemblerFailure == nil {
        let end = min(stream.endIndex, offset + step)
        buffer.append(contentsOf: stream[offset..<end])
        offset = end
        reading: while true {
            let before = (buffer.startIndex, buffer.count)
            switch decoder.decode(from: &buffer) {
            case .needMoreBytes(let atLeast):
                precondition(atLeast > 0 && buffer.startIndex == before.0 && buffer.count == before.1, "consumed on need more")
                break reading
            case .frame(let ciphertext):
                precondition(ciphertext.count >= WireLimits.frameCiphertextBytesMin, "short frame accepted")
                precondition(ciphertext.count <= WireLimits.frameCiphertextBytesMax, "long frame accepted")
                switch assembler.append(plaintext: ciphertext.dropLast(WireLimits.secretstreamOverheadBytes)) {
                case .incomplete: continue
                case .message(let message):
                    precondition(message.count <= WireLimits.messageBytesMax, "message over maximum")
                    _ = try? Message.decode(message)
                case .failure(let error):
                    assemblerFailure = error
                    break reading
                }
            case .failure(let error):
                decoderFailure = error
                break reading
            }
        }
    }
    // After a failure, each stage refuses everything with the same error, even valid input.
    if let decoderFailure {
        var valid: ArraySlice<UInt8> = [0, 0, 0, 18] + [UInt8](repeating: 0, count: 18)
        precondition(decoder.decode(from: &valid) == .failure(decoderFailure), "frame decoder not poisoned")
    }
    if let assemblerFailure {
        precondition(assembler.append(plaintext: [0, 0x0C]) == .failure(assemblerFailure), "assembler not poisoned")
    }
    return 0
}
