import Dispatch
import Foundation

/// Maps a batch in parallel chunks on the calling thread and Dispatch's workers: for the pure,
/// CPU-bound steps done before a write transaction (checking, hashing, encoding bodies).
enum ParallelMap {
    /// Below this many items the work is done on the calling thread alone.
    static let parallelCountMin = 64

    /// Result slots written from several threads, each index by exactly one of them.
    private struct DisjointSlots<Element>: @unchecked Sendable {
        let base: UnsafeMutableBufferPointer<Element>
    }

    /// `items.map(transform)`, computed in parallel. If any item fails, the error thrown is that
    /// of the first failing item in input order, as a sequential map would throw.
    static func map<Item: Sendable, Output: Sendable, Failure: Error>(
        _ items: [Item], _ transform: @Sendable (Item) throws(Failure) -> Output
    ) throws(Failure) -> [Output] {
        let chunkCount = items.count >= parallelCountMin ? min(8, ProcessInfo.processInfo.activeProcessorCount * 2) : 1
        let chunkSize = (items.count + chunkCount - 1) / max(chunkCount, 1)
        var results = [Result<Output, Failure>?](repeating: nil, count: items.count)
        results.withUnsafeMutableBufferPointer { buffer in
            let slots = DisjointSlots(base: buffer)
            DispatchQueue.concurrentPerform(iterations: chunkCount) { chunk in
                let range = (chunk * chunkSize)..<min((chunk + 1) * chunkSize, items.count)
                for index in range {
                    slots.base[index] = Result { () throws(Failure) in try transform(items[index]) }
                }
            }
        }
        var outputs: [Output] = []
        outputs.reserveCapacity(items.count)
        for result in results {
            switch result {
            case .success(let output)?: outputs.append(output)
            case .failure(let error)?: throw error
            case nil: preconditionFailure("every item is mapped")
            }
        }
        return outputs
    }
}
