import CanopyCore
import Foundation
import Testing
@testable import CanopyStore

@Suite("Bad input")
struct BadInputTests {
    private func expectInputError(
        _ store: DocumentStore, _ check: (StoreInputError) -> Bool, _ body: () throws -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let sequence = store.lastSequence
        do {
            try body()
            Issue.record("bad input was accepted", sourceLocation: sourceLocation)
        } catch {
            guard case .invalidInput(let input)? = error as? StoreError, check(input) else {
                Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
                return
            }
        }
        #expect(store.lastSequence == sequence, sourceLocation: sourceLocation)
        #expect(try store.changes(since: sequence).isEmpty, sourceLocation: sourceLocation)
    }

    private func bytesRevision(_ id: String, _ bytes: [UInt8]) throws -> ForeignRevision {
        let leaf = RevisionHasher.revisionID(parent: nil, kind: .live, canonicalBody: bytes)
        return ForeignRevision(documentID: id, path: try RevisionPath(leaf: leaf, kind: .live), body: .canonical(bytes))
    }

    @Test("document ids must be 1 to 1024 UTF-8 bytes")
    func documentIDs() throws {
        let store = try TestStore().store
        try expectInputError(store, { $0 == .emptyDocumentID }) { try store.put(id: "", body: body(1), replacing: nil) }
        let long = String(repeating: "é", count: 513)
        try expectInputError(store, { $0 == .documentIDTooLong(bytes: 1026, limit: 1024) }) {
            try store.put(id: long, body: body(1), replacing: nil)
        }
        try store.put(id: String(repeating: "é", count: 512), body: body(1), replacing: nil)
        #expect(throws: StoreInputError.documentIDNotUTF8) { try StoreInput.documentID(utf8: [0x61, 0xff]) }
        #expect(try StoreInput.documentID(utf8: Array("ok".utf8)) == "ok")
    }

    @Test("bodies must be JSON objects within the size limit")
    func bodies() throws {
        let store = try TestStore().store
        try expectInputError(store, { $0 == .bodyNotObject(documentID: "d") }) {
            try store.put(id: "d", body: .array([]), replacing: nil)
        }
        let huge = JSONValue.object(["s": .string(String(repeating: "x", count: StoreLimits.bodyBytesMax))])
        try expectInputError(store, { if case .bodyTooLarge(_, _, StoreLimits.bodyBytesMax) = $0 { true } else { false } }) {
            try store.put(id: "d", body: huge, replacing: nil)
        }
    }

    @Test("a foreign batch with invalid JSON, a non-object or non-canonical bytes fails whole")
    func foreignBodies() throws {
        let store = try TestStore().store
        let good = try foreign("good", body: body(1))
        let cases: [([UInt8], (StoreInputError) -> Bool)] = [
            (Array("{\"a\":".utf8), { if case .bodyNotCanonical = $0 { true } else { false } }),
            (Array("[1,2]".utf8), { $0 == .bodyNotObject(documentID: "bad") }),
            (Array("{\"b\":1,\"a\":2}".utf8), { if case .bodyNotCanonical = $0 { true } else { false } }),
            (Array("{\"a\": 1}".utf8), { if case .bodyNotCanonical = $0 { true } else { false } }),
            (Array("{\"a\":1.0}".utf8), { if case .bodyNotCanonical = $0 { true } else { false } }),
            (Array("{\"a\":\"\\u0041\"}".utf8), { if case .bodyNotCanonical = $0 { true } else { false } }),
            ([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d], { if case .bodyNotCanonical = $0 { true } else { false } }),
        ]
        for (bytes, check) in cases {
            try expectInputError(store, check) { try store.bulkInsertForeign([good, try! bytesRevision("bad", bytes)]) }
        }
        #expect(try store.documentCount == 0)
    }

    @Test("in a batch checked in parallel, the error names the first bad revision in input order")
    func firstErrorOfLargeBatch() throws {
        let store = try TestStore().store
        var batch = try (0..<300).map { n in try foreign("doc-\(n)", body: body(n)) }
        // Bad bodies in three different parallel chunks, the first one not in the first chunk.
        for n in [250, 140, 290] { batch[n] = try bytesRevision("doc-\(n)", Array("{\"a\": 1}".utf8)) }
        try expectInputError(store, { if case .bodyNotCanonical("doc-140", _) = $0 { true } else { false } }) {
            try store.bulkInsertForeign(batch)
        }
        #expect(try store.documentCount == 0)
        // The same batch without its bad revisions is then accepted whole.
        batch.removeAll { ["doc-140", "doc-250", "doc-290"].contains($0.documentID) }
        #expect(try store.bulkInsertForeign(batch).count == 297)
    }

    @Test("canonical bodies written by CanonicalJSON pass the check")
    func canonicalBodiesPass() throws {
        let value = JSONValue.object([
            "z": .array([.int(-3), .double(0.5), .double(1e21), .double(-2.5e-7), .null, .bool(true)]),
            "a\u{1}\"\\\n": .object(["é": .string("tab\there\u{7f}"), "": .int(Int64.max)]),
            "m": .double(123456.789),
        ])
        let bytes = CanonicalJSON.encode(value)
        #expect(CanonicalJSONCheck.problem(in: bytes) == nil)
        let store = try TestStore().store
        #expect(try store.bulkInsertForeign([try bytesRevision("ok", bytes)])[0].added.count == 1)
        #expect(try store.get(id: "ok").body == value)
    }

    @Test("malformed revision ids and histories with gaps or wrong generations are typed errors")
    func revisionsAndHistories() throws {
        #expect(throws: StoreInputError.malformedRevisionID(documentID: "d", text: "1-xyz")) {
            try StoreInput.revisionID("1-xyz", of: "d")
        }
        let revisions = chain(4)
        #expect(throws: RevTreeError.self) {
            try RevisionPath(leaf: revisions[0].id, kind: .live, ancestors: [revisions[2].id])
        }
        let store = try TestStore().store
        let batch = [try foreign("x", body: body(1))]
        #expect(try store.bulkInsertForeign(batch).count == 1)
    }

    @Test("an oversized batch is refused before anything is checked or written")
    func oversizedBatch() throws {
        let store = try TestStore().store
        let writes = Array(repeating: LocalWrite(documentID: "d", body: body(1), replacing: nil), count: StoreLimits.foreignBatchCountMax + 1)
        try expectInputError(store, { if case .batchTooLarge = $0 { true } else { false } }) { _ = try store.putBatch(writes) }
    }
}

@Suite("Canonical JSON reader")
struct CanonicalJSONReaderTests {
    @Test("the fast reader gives the same value as JSONValue.parse for canonical bytes")
    func matchesGeneralParser() throws {
        var random = SplitMix64(seed: 42)
        let samples: [JSONValue] = [
            .object([:]),
            .object(["a": .array([]), "b": .object([:]), "c": .null, "d": .bool(false), "e": .bool(true)]),
            .object(["big": .double(1e21), "neg": .int(Int64.min), "max": .int(Int64.max), "frac": .double(-0.000001),
                     "huge": .double(1.8446744073709552e19), "tiny": .double(.leastNonzeroMagnitude), "half": .double(0.5)]),
            .object(["esc\"\\\u{0}\u{1f}\n\t\u{8}\u{c}\r": .string("é漢字😀\u{7f}/"), "": .string("")]),
            .object(["nested": .array([.array([.object(["x": .int(1)])]), .string("s")])]),
        ]
        var values = samples
        for _ in 0..<200 { values.append(.object(["r": .double(Double(bitPattern: random.next() & 0x7FEF_FFFF_FFFF_FFFF)), "i": .int(Int64(bitPattern: random.next()))])) }
        for value in values {
            let bytes = CanonicalJSON.encode(value)
            let fast = try #require(CanonicalJSONReader.parse(bytes), "reader refused \(String(decoding: bytes, as: UTF8.self))")
            // Integral doubles read back as integers (canonical form writes them so): compare
            // with the general parser and with the bytes, not with `value` itself.
            #expect(fast == (try JSONValue.parse(bytes)))
            #expect(CanonicalJSON.encode(fast) == bytes)
        }
    }

    @Test("the fast reader refuses what it does not expect, leaving it to the general parser")
    func refusesNonCanonical() {
        for text in ["{\"a\": 1}", "{\"a\":01x}", "{\"a\":", "[1,]", "{\"a\":1}x", "{\"a\":1e400}", "{\"a\":\"\\q\"}"] {
            #expect(CanonicalJSONReader.parse(Array(text.utf8)) == nil, "accepted \(text)")
        }
    }
}
