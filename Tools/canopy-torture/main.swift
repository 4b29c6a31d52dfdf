import ArgumentParser

/// canopy-torture: attacks real `canopyd` processes (kills, a full disk, flipped bytes, connection
/// and admin floods) and prints what they measured. Exits 1 when a target is missed and 3 when an
/// experiment could not be carried out, so it can be used as a check. Method:
/// Tools/canopy-torture/README.md.
// No @main: with more than one source file, main.swift is the entry point (top-level code).
struct CanopyTorture: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "canopy-torture",
        abstract: "Attack real canopyd agents and print figures; exit 1 when a target is missed.",
        subcommands: [Kill9.self, DiskFull.self, ByteFlip.self, HandshakeAttack.self, AdminFlood.self, Model.self, All.self])
}

Cleanup.shared.install()
CanopyTorture.main()
