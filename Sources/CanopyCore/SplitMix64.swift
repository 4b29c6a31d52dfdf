/// SplitMix64, the small seeded generator Canopy uses wherever randomness must replay exactly
/// (simulation, property tests, backoff jitter under test). Its output is pinned by a test, so it
/// cannot change between Swift versions the way the standard library's algorithms may.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator that starts from `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in `0..<upperBound` (rejection sampling, so it does not depend on the
    /// standard library's `random(in:using:)` algorithm).
    public mutating func next(below upperBound: UInt64) -> UInt64 {
        precondition(upperBound > 0, "upper bound must be positive")
        let limit = UInt64.max - UInt64.max % upperBound
        while true {
            let value = next()
            if value < limit { return value % upperBound }
        }
    }

    /// A uniform index in `0..<count`.
    public mutating func index(below count: Int) -> Int {
        Int(next(below: UInt64(count)))
    }

    /// True with probability `numerator / denominator`.
    public mutating func chance(_ numerator: UInt64, in denominator: UInt64) -> Bool {
        next(below: denominator) < numerator
    }

    /// The elements of `array` in a random order (Fisher–Yates with this generator).
    public mutating func shuffled<T>(_ array: [T]) -> [T] {
        var result = array
        if result.count < 2 { return result }
        for i in stride(from: result.count - 1, to: 0, by: -1) {
            let j = index(below: i + 1)
            result.swapAt(i, j)
        }
        return result
    }
}
