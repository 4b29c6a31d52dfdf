import ArgumentParser

/// canopy-bench: Canopy's benchmarks. Each figure is printed beside a ceiling measured in the
/// same run on the same machine.
// No @main: with more than one source file, main.swift is the entry point (top-level code).
struct CanopyBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopy-bench",
        abstract: "Measure Canopy against ceilings measured in the same run.",
        subcommands: [
            StoreBench.self, WireBench.self, EngineBench.self, ReplicateBench.self, LatencyBench.self, ScaleBench.self,
            MeshBench.self,
        ])
}

CanopyBench.main()
