import Foundation

/// A fresh directory under the system temp dir, removed when the value is deinitialised.
final class TemporaryDirectory {
    let url: URL

    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("canopy-library-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// A path inside the directory.
    func path(_ name: String) -> String { url.appendingPathComponent(name).path }
}
