// swift-tools-version:6.0
// An application in a package of its own that depends on Canopy by path and imports only
// `Canopy`: two nodes in one process replicate a note over encrypted TCP.
import PackageDescription

let package = Package(
    name: "notes-app",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "Canopy", path: "../../..")],
    targets: [.executableTarget(name: "notes-app", dependencies: [.product(name: "Canopy", package: "Canopy")])]
)
