// swift-tools-version:6.0
// Canopy: a peer-to-peer document replication agent. See README.md and Protocol/.
//
// Dependency direction (Protocol/design.md §1): CanopyCore ← CanopyWire ← CanopyCrypto;
// CanopyCore ← CanopyStore; {Core, Wire, Store} ← CanopyReplication ← CanopyAdmin ← CanopyAgent.
// Only CSQLite/CSodium wrappers import the C libraries.
import PackageDescription

/// The shipped binaries (canopyd, canopyctl, canopy-bench) link the Swift runtime and Foundation
/// statically in release builds: they then run on a Linux machine without a Swift toolchain (they
/// need only libc, libstdc++, libsqlite3 and libsodium), and each agent maps 5 MiB fewer library
/// pages (peak RSS at 1M documents, `canopy-bench replicate --count 1000000`: receiver 60 → 55 MiB,
/// sender 52 → 47 MiB). The flag is needed when compiling the executable's module too: it makes
/// the module link the static libraries' own dependencies (CoreFoundation, ICU). Debug builds
/// (the tests) stay dynamic.
let staticRuntimeSwiftSettings: [SwiftSetting] = [
    .unsafeFlags(["-static-stdlib"], .when(platforms: [.linux], configuration: .release))
]
let staticRuntimeLinkerSettings: [LinkerSetting] = [
    .unsafeFlags(["-static-stdlib"], .when(platforms: [.linux], configuration: .release))
]

let package = Package(
    name: "Canopy",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "Canopy", targets: ["Canopy"]),
        // A whole node (TCP listener, encrypted channel, admin socket) inside an application.
        .library(name: "CanopyAgent", targets: ["CanopyAgent"]),
        .executable(name: "canopy-bench", targets: ["canopy-bench"]),
        .executable(name: "canopyd", targets: ["canopyd"]),
        .executable(name: "canopyctl", targets: ["canopyctl"]),
        .executable(name: "canopy-sim", targets: ["canopy-sim"]),
        .executable(name: "canopy-torture", targets: ["canopy-torture"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        // X25519 only, in CanopyCrypto's EphemeralKey: a measured gain over libsodium (Tools/canopy-bench/README.md).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // `swift package generate-documentation --target Canopy` (the Canopy.docc catalog); no target depends on it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // System libraries (Debian packages; Tools/setup installs them).
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CSodium", pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"])]),

        // Pure core: revision ids, trees, canonical JSON, conflict policies.
        .target(name: "CanopyCore", dependencies: ["CSodium"]),
        // Pure wire codec: frames, messages, limits.
        .target(name: "CanopyWire", dependencies: ["CanopyCore"]),
        // libsodium: identities, handshake, secure channel.
        .target(
            name: "CanopyCrypto",
            dependencies: ["CSodium", "CanopyWire", .product(name: "Crypto", package: "swift-crypto")]),
        // The admin protocol (Protocol/admin-v1.md) as Codable types: every command with its
        // arguments, every reply, every event and the error codes. The agent, canopyctl and the
        // library's clients all speak it; no admin JSON is built or read anywhere else.
        .target(name: "CanopyAdmin", dependencies: ["CanopyCore", "CanopyReplication"]),
        // SQLite document store.
        .target(
            name: "CanopyStore",
            dependencies: [
                "CSQLite", "CSodium", "CanopyCore",
                .product(name: "Logging", package: "swift-log"),
            ]),
        // Replication state machines over injected transport, clock, scheduler, randomness.
        .target(
            name: "CanopyReplication",
            dependencies: [
                "CanopyCore", "CanopyWire", "CanopyStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]),
        // Deterministic simulation: scheduler, network with faults, invariant checkers.
        .target(
            name: "CanopySimulation",
            dependencies: [
                "CanopyAdmin", "CanopyCore", "CanopyWire", "CanopyCrypto", "CanopyStore", "CanopyReplication",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]),
        // The library an application embeds: a database, and a whole node (`Node`) over the agent.
        .target(
            name: "Canopy",
            dependencies: [
                "CanopyAdmin", "CanopyCore", "CanopyWire", "CanopyStore", "CanopyReplication", "CanopyAgent",
                .product(name: "Logging", package: "swift-log"),
            ]),

        // The Dispatch shell: data directory, config, TCP peers, admin socket, wiring.
        .target(
            name: "CanopyAgent",
            dependencies: [
                "CanopyAdmin", "CanopyCore", "CanopyWire", "CanopyCrypto", "CanopyStore", "CanopyReplication", "CSodium",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]),
        .executableTarget(
            name: "canopyd",
            dependencies: [
                "Canopy",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tools/canopyd",
            exclude: ["README.md"],
            swiftSettings: staticRuntimeSwiftSettings, linkerSettings: staticRuntimeLinkerSettings),
        .executableTarget(
            name: "canopyctl",
            dependencies: [
                "CanopyAdmin", "CanopyAgent", "CanopyReplication", "CanopyStore", "CanopyCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tools/canopyctl",
            exclude: ["README.md"],
            swiftSettings: staticRuntimeSwiftSettings, linkerSettings: staticRuntimeLinkerSettings),

        .executableTarget(
            name: "canopy-bench",
            dependencies: [
                "CanopyAdmin", "CanopyCore", "CanopyStore", "CanopyWire", "CanopyCrypto", "CanopyReplication", "CanopySimulation",
                "CanopyAgent", "CSQLite", "CSodium",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/canopy-bench",
            exclude: ["README.md"],
            swiftSettings: staticRuntimeSwiftSettings, linkerSettings: staticRuntimeLinkerSettings),

        // The deterministic simulator's command line (Protocol/design.md §7).
        .executableTarget(
            name: "canopy-sim",
            dependencies: [
                "CanopySimulation", "CanopyCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/canopy-sim",
            exclude: ["README.md"]),

        // Attacks real canopyd processes and prints figures (Tools/canopy-torture/README.md).
        .executableTarget(
            name: "canopy-torture",
            dependencies: [
                "CanopyAdmin", "CanopyAgent", "CanopyCore", "CanopyReplication",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Tools/canopy-torture",
            exclude: ["README.md"]),

        // Child process of the store's durability test: writes batches until it is killed.
        .executableTarget(
            name: "canopy-crashtest", dependencies: ["CanopyCore", "CanopyStore"], path: "Tools/canopy-crashtest"),

        // What the tests that start programs share: `ChildProcess`, which starts them without
        // Foundation's `Process.run()` (see its documentation).
        .target(name: "CanopyTestSupport", path: "Tests/CanopyTestSupport"),

        .testTarget(name: "CanopyCoreTests", dependencies: ["CanopyCore"]),
        .testTarget(name: "CanopyAdminTests", dependencies: ["CanopyAdmin", "CanopyCore"]),
        // The embedding API as an application sees it: `import Canopy` and nothing else, except
        // in the tests that check what only the engine's modules show (a file of another store).
        .testTarget(name: "CanopyLibraryTests", dependencies: ["Canopy", "CanopyCore", "CanopyStore", "CanopyReplication"]),
        .testTarget(name: "CanopyWireTests", dependencies: ["CanopyWire", "CanopyCore"]),
        .testTarget(name: "CanopyCryptoTests", dependencies: ["CanopyCrypto", "CanopyWire"]),
        .testTarget(
            name: "CanopyStoreTests",
            // canopy-crashtest is a dependency so that it is built before the tests spawn it.
            dependencies: ["CanopyStore", "CanopyCore", "CSQLite", "canopy-crashtest", "CanopyTestSupport"]),
        .testTarget(
            name: "CanopyReplicationTests",
            dependencies: ["CanopyReplication", "CanopyStore", "CanopyCore", "CanopyWire", "CanopySimulation"]),
        .testTarget(
            name: "CanopyAgentTests",
            dependencies: ["CanopyAdmin", "CanopyAgent", "CanopyCore", "CanopyCrypto", "CanopyWire", "CanopyReplication", "CanopyTestSupport"]),
        // Black-box tests: run the built canopyd/canopyctl binaries as child processes.
        .testTarget(
            name: "CanopyEndToEndTests",
            dependencies: ["Canopy", "CanopyAdmin", "CanopyAgent", "CanopyCore", "CanopyCrypto", "CanopyStore", "CanopyTestSupport", "canopyd", "canopyctl"],
            exclude: ["Fixtures"]),
        .testTarget(
            name: "CanopySimulationTests",
            dependencies: ["CanopySimulation", "CanopyReplication", "CanopyStore", "CanopyCore", "CanopyCrypto"]),
    ],
    swiftLanguageModes: [.v6]
)
