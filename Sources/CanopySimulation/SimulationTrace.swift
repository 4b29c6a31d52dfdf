import CanopyCore

/// The record of one simulation run: a running BLAKE2b hash over every (time, event) the run
/// produced — messages (type and size), faults, writes, document events — so that two runs can be
/// compared with one value, and, when asked, the lines that concern one document.
///
/// Invariant: the hash depends only on the sequence of records, which the simulator produces in
/// scheduler order; nothing that varies between processes or machines (file paths, hash-table
/// order, processor count) is recorded. The nodes' ids and database ids are drawn from the seed
/// and recorded at setup.
public final class SimulationTrace: @unchecked Sendable {
    /// The hash so far (32 bytes).
    public private(set) var hash: [UInt8] = Blake2b.hash(Array("canopy-sim-trace-v1".utf8))
    /// Records so far.
    public private(set) var count = 0
    /// The document whose history is kept line by line, if any.
    public let document: String?
    /// Lines that concern `document`, in order.
    public private(set) var documentLines: [String] = []
    private let clock: () -> Double

    /// A trace that reads the time from `clock` and keeps `document`'s history when given.
    public init(document: String?, clock: @escaping () -> Double) {
        self.document = document
        self.clock = clock
    }

    /// Adds one record. `documents` names the documents it concerns (for `--trace`); `detail` is
    /// shown in the document's history but not hashed (so tracing never changes the hash).
    public func record(_ event: String, documents: [String] = [], detail: String = "") {
        let time = clock()
        var input = hash
        withUnsafeBytes(of: time.bitPattern.littleEndian) { input.append(contentsOf: $0) }
        input.append(contentsOf: event.utf8)
        hash = Blake2b.hash(input)
        count += 1
        if let document, documents.contains(document) {
            documentLines.append("\(Self.format(time)) \(event)\(detail)")
        }
    }

    /// The hash as 64 lowercase hex characters.
    public var hashHex: String {
        hash.map { byte in
            let table = Array("0123456789abcdef")
            return String([table[Int(byte >> 4)], table[Int(byte & 0xf)]])
        }.joined()
    }

    /// Virtual seconds with millisecond precision, for humans.
    public static func format(_ seconds: Double) -> String {
        let millis = Int64((seconds * 1000).rounded())
        let fraction = String(millis % 1000)
        return "\(millis / 1000).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)s"
    }
}
