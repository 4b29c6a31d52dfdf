import ArgumentParser

/// `all`: every experiment with its defaults (or its `--quick` slice), one after another, then a
/// summary table. Exits 1 when any target was missed.
struct All: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "all", abstract: "Run every experiment and print a summary table.")

    @OptionGroup var common: CommonOptions

    func run() throws {
        // Each experiment is parsed from the common options, so it starts from its own defaults.
        var arguments = ["--seed", String(common.seed)]
        if let binDir = common.binDir { arguments += ["--bin-dir", binDir] }
        if common.quick { arguments.append("--quick") }
        if common.keep { arguments.append("--keep") }
        let experiments: [any Experiment] = [
            try Kill9.parse(arguments), try DiskFull.parse(arguments), try ByteFlip.parse(arguments),
            try HandshakeAttack.parse(arguments), try AdminFlood.parse(arguments), try Model.parse(arguments),
        ]
        let results = try experiments.map { experiment in try Report.running { try experiment.experiment() } }
        Report.finish(results, json: common.json, table: true)
    }
}
