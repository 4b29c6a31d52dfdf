import CanopyCore
import CanopyStore
import Foundation

/// The phases of `canopy-bench store`. Each returns the seconds its timed part took; inputs are
/// prepared, and cut into batches, before the clock starts (a peer's bodies and ids arrive
/// ready-made on the wire).
enum StoreBenchPhases {
    /// The ceiling: plain INSERTs of the same bytes, one transaction per batch.
    static func rawCeiling(path: String, bodies: [[UInt8]], batch: Int) throws -> Double {
        let ids = bodies.indices.map { StoreBenchData.documentID($0) }
        let (wall, cpu) = try rawInserts(path: path, count: bodies.count, batch: batch) { range in
            range.map { (ids[$0], bodies[$0]) }
        }
        FileHandle.standardError.write(Data(String(format: "  (%.3f s wall, %.3f s CPU)\n", wall, cpu).utf8))
        return wall
    }

    /// Plain INSERTs of `count` (id, body) rows into a new table of `path`, `batch` per
    /// transaction: every ceiling of the benchmarks. `rows` makes one batch's rows before its
    /// transaction starts; only the transactions are timed. Returns their wall and CPU seconds.
    static func rawInserts(
        path: String, count: Int, batch: Int, rows: (Range<Int>) -> [(id: String, body: [UInt8])]
    ) throws -> (wall: Double, cpu: Double) {
        let db = try Database(path: path)
        try db.execute("CREATE TABLE raw (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
        var wall = 0.0
        var cpu = 0.0
        for start in stride(from: 0, to: count, by: batch) {
            let rows = rows(start..<min(start + batch, count))
            let began = DispatchTime.now().uptimeNanoseconds
            let cpuBegan = BenchClock.cpuSeconds(CLOCK_PROCESS_CPUTIME_ID)
            try db.transaction { db in
                let statement = try db.cached("INSERT INTO raw(id, body) VALUES (?, ?)")
                for (id, body) in rows {
                    try statement.bind(id, at: 1)
                    try statement.bind(body, at: 2)
                    try statement.run()
                }
            }
            wall += Double(DispatchTime.now().uptimeNanoseconds - began) / 1e9
            cpu += BenchClock.cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpuBegan
        }
        return (wall, cpu)
    }

    /// Foreign revisions of new documents, hash-verified, in batches.
    static func foreignInserts(path: String, bodies: [[UInt8]], batch: Int) throws -> Double {
        let store = try DocumentStore(path: path)
        let revisions = try bodies.enumerated().map { index, body in
            let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: body)
            return ForeignRevision(
                documentID: StoreBenchData.documentID(index), path: try RevisionPath(leaf: leaf, kind: .live),
                body: .canonical(body))
        }
        let batches = stride(from: 0, to: revisions.count, by: batch).map { Array(revisions[$0..<min($0 + batch, revisions.count)]) }
        return try measure {
            for revisions in batches { _ = try store.bulkInsertForeign(revisions) }
        }
    }

    /// Local puts of new documents, `batch` per transaction.
    static func localBatches(path: String, bodies: [JSONValue], batch: Int) throws -> Double {
        let store = try DocumentStore(path: path)
        let writes = bodies.enumerated().map { index, body in
            LocalWrite(documentID: StoreBenchData.documentID(index), body: body, replacing: nil)
        }
        let batches = stride(from: 0, to: writes.count, by: batch).map { Array(writes[$0..<min($0 + batch, writes.count)]) }
        return try measure {
            for writes in batches { _ = try store.putBatch(writes) }
        }
    }

    /// Local puts, one transaction each.
    static func singlePuts(path: String, bodies: [JSONValue]) throws -> Double {
        let store = try DocumentStore(path: path)
        return try measure {
            for (index, body) in bodies.enumerated() {
                try store.put(id: StoreBenchData.documentID(index), body: body, replacing: nil)
            }
        }
    }

    /// Gets of documents spread over the store (a fixed stride, so the run is reproducible).
    static func gets(path: String, documents: Int, gets: Int) throws -> Double {
        let store = try DocumentStore(path: path)
        return try measure {
            var index = 0
            for _ in 0..<gets {
                index = (index + 7_919) % documents
                _ = try store.get(id: StoreBenchData.documentID(index))
            }
        }
    }

    /// Wall-clock seconds `body` takes; its CPU seconds go to stderr (on a shared machine the
    /// gap between the two shows time lost waiting for a core or the disk).
    static func measure(_ body: () throws -> Void) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        let cpuStart = BenchClock.cpuSeconds(CLOCK_PROCESS_CPUTIME_ID)
        try body()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        FileHandle.standardError.write(Data(String(format: "  (%.3f s wall, %.3f s CPU)\n", seconds, BenchClock.cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpuStart).utf8))
        return seconds
    }
}

/// Deterministic benchmark documents of about 1 KiB of canonical JSON.
enum StoreBenchData {
    static func documentID(_ index: Int) -> String { "doc-\(String(index, radix: 16))" }

    static func body(_ index: Int) -> JSONValue {
        let filler = String(repeating: "lorem ipsum dolor sit amet ", count: 30)
        return .object([
            "index": .int(Int64(index)),
            "title": .string("Document number \(index)"),
            "tags": .array([.string("bench"), .string("store"), .string("t\(index % 97)")]),
            "owner": .object(["name": .string("user\(index % 1000)"), "active": .bool(index % 2 == 0)]),
            "score": .double(Double(index) / 8),
            "text": .string(String(filler.prefix(850))),
        ])
    }
}
