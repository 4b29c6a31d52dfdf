import Dispatch

/// Maps a batch in parallel chunks on the calling thread and Dispatch's workers: for the pure,
/// CPU-bound steps done before a write transaction (checking, hashing, encoding bodies).
enum ParallelMap {
    /// Below this many items the work is done on the calling thread alone.
    static let parallelCountMin = 64

    /// Chunks a large batch is cut into, on any machine: which items run together depends on the
    /// batch alone, never on the processor count, so a run (the simulator's replay of a seed
    /// above all) cuts its batches alike on every machine. Dispatch spreads the chunks over the
    /// cores there are: two per core on four cores, four per core on two.
    static let chunkCount = 8

    /// Output slots and per-chunk outcomes written from several threads, each slot by exactly
    /// one of them.
    private struct DisjointSlots<Output, Failure: Error>: @unchecked Sendable {
        let outputs: UnsafeMutablePointer<Output>
        /// Per chunk: how many of its outputs were initialised, and the error that stopped it.
        let outcomes: UnsafeMutableBufferPointer<(initialized: Int, failure: Failure?)>
    }

    /// `items.map(transform)`, computed in parallel. If any item fails, the error thrown is that
    /// of the first failing item in input order, as a sequential map would throw.
    ///
    /// Outputs are written straight into the result's storage (no `Result` per item and no
    /// second copy: on the replication path the outputs hold bodies and paths, and copying them
    /// again cost reference-count traffic per revision).
    static func map<Item: Sendable, Output: Sendable, Failure: Error>(
        _ items: [Item], _ transform: @Sendable (Item) throws(Failure) -> Output
    ) throws(Failure) -> [Output] {
        let chunkCount = items.count >= parallelCountMin ? Self.chunkCount : 1
        let chunkSize = (items.count + chunkCount - 1) / max(chunkCount, 1)
        var outcomes = [(initialized: Int, failure: Failure?)](repeating: (0, nil), count: chunkCount)
        let outputs = [Output](unsafeUninitializedCapacity: items.count) { buffer, initializedCount in
            outcomes.withUnsafeMutableBufferPointer { outcomeBuffer in
                guard let base = buffer.baseAddress else { return }
                let slots = DisjointSlots(outputs: base, outcomes: outcomeBuffer)
                DispatchQueue.concurrentPerform(iterations: chunkCount) { chunk in
                    let range = (chunk * chunkSize)..<min((chunk + 1) * chunkSize, items.count)
                    for index in range {
                        do throws(Failure) {
                            (slots.outputs + index).initialize(to: try transform(items[index]))
                            slots.outcomes[chunk].initialized += 1
                        } catch {
                            slots.outcomes[chunk].failure = error
                            return
                        }
                    }
                }
            }
            if outcomes.allSatisfy({ $0.failure == nil }) {
                initializedCount = items.count
                return
            }
            // Some chunk stopped early: release what every chunk did initialise; the array is
            // then empty and the first error is thrown below.
            for (chunk, outcome) in outcomes.enumerated() where outcome.initialized > 0 {
                (buffer.baseAddress! + chunk * chunkSize).deinitialize(count: outcome.initialized)
            }
            initializedCount = 0
        }
        // Chunks cover the input in order, so the first chunk that failed holds the first error.
        if let failure = outcomes.lazy.compactMap(\.failure).first { throw failure }
        return outputs
    }
}
