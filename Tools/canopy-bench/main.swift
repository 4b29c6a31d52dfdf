import ArgumentParser
import CanopyStore

/// canopy-bench: Canopy's benchmarks. Each figure is printed beside a ceiling measured in the
/// same run on the same machine.
// No @main: with more than one source file, main.swift is the entry point (top-level code).
struct CanopyBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopy-bench",
        abstract: "Measure Canopy against ceilings measured in the same run.",
        subcommands: [
            StoreBench.self, WireBench.self, EngineBench.self, ReplicateBench.self, LatencyBench.self, ScaleBench.self,
            MeshBench.self, ImportBench.self, ResolveBench.self, DatabasesBench.self, AttachmentStorageBench.self, AttachmentAdminBench.self,
            AttachmentReplicationBench.self, IntrospectBench.self,
        ])
}

// The same process-wide SQLite setting as `canopyd`, before any benchmark opens a database, so
// every ceiling and library phase measured here runs under the settings the agents use.
Database.disableMemoryStatistics()
CanopyBench.main()
