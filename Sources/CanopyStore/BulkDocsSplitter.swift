/// Splits a `_bulk_docs` body — `{"docs": [DOC, DOC, …], "new_edits": false}` — into the bytes
/// of each `DOC` as they stream in, without holding the whole body: an import of a 1 GB file
/// holds one document (and one read chunk) at a time.
///
/// Data model:
///
///     body    := ws '{' ws member (ws ',' ws member)* ws '}' ws
///     member  := string ws ':' ws value        "docs" must be an array of objects; any other
///                                              member's value is kept whole (it is small: e.g.
///                                              "new_edits") and handed to `members`
///
/// Only the structure is checked here (brackets, strings, where elements start and end); each
/// element's own JSON is parsed by the caller, which reports its errors with the element's index.
/// An element is handed out without the whitespace between its tokens, so a pretty-printed body
/// gives the same elements as the same body on one line, and none holds a line break. Members
/// may come in any order and with any whitespace between them.
/// Feeding the same bytes in any chunking gives the same elements (tested byte by byte, at once
/// and in random chunks).
package struct BulkDocsSplitter: Sendable {
    /// Why a body is not a `_bulk_docs` body.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        /// Offset of the offending byte from the start of the body.
        public let offset: Int
        public let detail: String
        /// The body is a CouchDB `_all_docs` response (`{"total_rows", "offset", "rows"}`), a
        /// listing often mistaken for a dump: the caller can say how to make one of it.
        public var isAllDocsResponse = false
        public var description: String { "not a _bulk_docs body at byte \(offset): \(detail)" }
    }

    /// Where the scanner is.
    private enum Place: Sendable {
        case beforeBody, beforeKey, inKey, afterKey, beforeValue
        case inValue            // a member value other than "docs", kept in `current`
        case beforeElement      // in "docs", expecting an element or `]`
        case inElement          // inside an element, kept in `current`
        case afterElement       // in "docs", expecting `,` or `]`
        case afterMember        // expecting `,` or `}`
        case done               // after the closing `}`: only whitespace
    }

    private var place = Place.beforeBody
    private var offset = 0
    /// Bytes of the key, element or member value being read.
    private var current: [UInt8] = []
    private var key: [UInt8] = []
    /// Nesting depth inside the current element or value (0 outside).
    private var depth = 0
    private var inString = false
    private var escaped = false
    /// True once a "docs" member was read.
    public private(set) var sawDocs = false
    /// The largest element or member value accepted; beyond it the body is refused (an element
    /// is one document's revision: bounded by the body limit plus its history).
    public let elementBytesMax: Int

    public init(elementBytesMax: Int) {
        self.elementBytesMax = elementBytesMax
    }

    /// True when the whole body was read.
    public var isComplete: Bool {
        if case .done = place { return true }
        return false
    }

    /// Scans `bytes`, calling `element` with each complete "docs" element's bytes and `member`
    /// with each other member's name and value bytes.
    public mutating func feed(
        _ bytes: [UInt8], element: ([UInt8]) throws -> Void,
        member: (String, [UInt8]) throws -> Void = { _, _ in }
    ) throws {
        try bytes.withUnsafeBufferPointer { buffer in
            var index = 0
            while index < buffer.count {
                if case .inElement = place {
                    // The bulk of a body: scan to the element's end in a tight loop and take the
                    // run of bytes at once (byte-by-byte stepping ran at about 15 MB/s).
                    let end = try scanElement(buffer, from: index)
                    offset += end - index
                    index = end
                    if depth == 0 {
                        try element(current)
                        current = []
                        place = .afterElement
                    }
                    continue
                }
                try step(buffer[index], element: element, member: member)
                offset += 1
                index += 1
            }
        }
    }

    /// Inside an element: consumes bytes from `start` until the element closes (depth 0) or the
    /// buffer ends, appending them to `current` without the whitespace between tokens; returns
    /// where it stopped.
    ///
    /// The whitespace goes because an element travels to the agent inside one admin request line:
    /// a pretty-printed document (`jq`, `python3 -m json.tool`) would otherwise carry its line
    /// breaks into the request and cut it in pieces. A line break can appear nowhere else in
    /// valid JSON: inside a string it must be written `\n`, so a raw control character in a
    /// string is refused here.
    private mutating func scanElement(_ buffer: UnsafeBufferPointer<UInt8>, from start: Int) throws -> Int {
        var index = start
        var runStart = start
        var depth = self.depth
        var inString = self.inString
        var escaped = self.escaped
        scan: while index < buffer.count {
            let byte = buffer[index]
            index += 1
            if inString {
                if escaped {
                    escaped = false
                } else if byte == 0x5C {
                    escaped = true
                } else if byte == 0x22 {
                    inString = false
                } else if byte < 0x20 {
                    throw Problem(
                        offset: offset + index - 1 - start,
                        detail: "a control character (0x\(String(byte, radix: 16))) inside a string; JSON writes it escaped, as \\n for a line break")
                }
                continue
            }
            switch byte {
            case 0x22: inString = true
            case 0x7B, 0x5B: depth += 1
            case 0x7D, 0x5D:
                depth -= 1
                if depth == 0 { break scan }
            case 0x20, 0x09, 0x0A, 0x0D:
                try take(buffer, runStart..<index - 1)
                runStart = index
            default: break
            }
        }
        try take(buffer, runStart..<index)
        self.depth = depth
        self.inString = inString
        self.escaped = escaped
        return index
    }

    /// Appends a run of an element's bytes to `current`, within `elementBytesMax`.
    private mutating func take(_ buffer: UnsafeBufferPointer<UInt8>, _ run: Range<Int>) throws {
        guard !run.isEmpty else { return }
        guard current.count + run.count <= elementBytesMax else {
            throw problem("a document is larger than \(elementBytesMax) bytes")
        }
        current.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[run]))
    }

    /// Checks that the body ended where a body may end.
    public func finish() throws(Problem) {
        guard isComplete else { throw Problem(offset: offset, detail: "the body ends early") }
        guard sawDocs else { throw Problem(offset: offset, detail: "it has no \"docs\" array") }
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

    private func problem(_ detail: String) -> Problem { Problem(offset: offset, detail: detail) }

    private mutating func step(_ byte: UInt8, element: ([UInt8]) throws -> Void, member: (String, [UInt8]) throws -> Void) throws {
        switch place {
        case .beforeBody:
            if Self.isSpace(byte) { return }
            guard byte == UInt8(ascii: "{") else { throw problem("expected { at the start") }
            place = .beforeKey
        case .beforeKey:
            if Self.isSpace(byte) { return }
            if byte == UInt8(ascii: "}") && key.isEmpty && !sawDocs { place = .done; return }
            guard byte == UInt8(ascii: "\"") else { throw problem("expected a member name") }
            key = []
            place = .inKey
        case .inKey:
            if escaped { escaped = false; key.append(byte); return }
            if byte == UInt8(ascii: "\\") { escaped = true; key.append(byte); return }
            if byte == UInt8(ascii: "\"") { place = .afterKey; return }
            key.append(byte)
        case .afterKey:
            if Self.isSpace(byte) { return }
            guard byte == UInt8(ascii: ":") else { throw problem("expected : after a member name") }
            place = .beforeValue
        case .beforeValue:
            if Self.isSpace(byte) { return }
            if !sawDocs && (key == Array("rows".utf8) || key == Array("total_rows".utf8)) {
                var allDocs = problem("it is a CouchDB _all_docs response (\"\(String(decoding: key, as: UTF8.self))\"), which lists documents in \"rows\"; a _bulk_docs body has them in \"docs\"")
                allDocs.isAllDocsResponse = true
                throw allDocs
            }
            if key == Array("docs".utf8) {
                guard !sawDocs else { throw problem("\"docs\" appears twice") }
                guard byte == UInt8(ascii: "[") else { throw problem("\"docs\" must be an array") }
                sawDocs = true
                place = .beforeElement
            } else {
                current = []
                place = .inValue
                try value(byte, element: element, member: member)
            }
        case .inValue:
            try value(byte, element: element, member: member)
        case .beforeElement, .afterElement:
            if Self.isSpace(byte) { return }
            if byte == UInt8(ascii: "]") {
                if case .beforeElement = place, offsetAfterComma { throw problem("a , before ]") }
                place = .afterMember
                return
            }
            if case .afterElement = place {
                guard byte == UInt8(ascii: ",") else { throw problem("expected , or ] after a document") }
                offsetAfterComma = true
                place = .beforeElement
                return
            }
            guard byte == UInt8(ascii: "{") else { throw problem("each element of \"docs\" must be an object") }
            offsetAfterComma = false
            current = [byte]
            depth = 1
            place = .inElement
        case .inElement:
            preconditionFailure("feed scans an element with scanElement, never byte by byte")
        case .afterMember:
            if Self.isSpace(byte) { return }
            if byte == UInt8(ascii: ",") { key = []; place = .beforeKey; return }
            guard byte == UInt8(ascii: "}") else { throw problem("expected , or } after a member") }
            place = .done
        case .done:
            guard Self.isSpace(byte) else { throw problem("bytes after the body") }
        }
    }

    /// True right after a `,` in "docs" (so `[1,]` is refused).
    private var offsetAfterComma = false

    /// Reads a byte of a member value other than "docs": a string ends at its closing quote, an
    /// array or object at its closing bracket, a scalar (`false`, a number) at the `,`, `}` or
    /// space after it.
    private mutating func value(_ byte: UInt8, element: ([UInt8]) throws -> Void, member: (String, [UInt8]) throws -> Void) throws {
        let composite = current.first.map { $0 == UInt8(ascii: "{") || $0 == UInt8(ascii: "[") || $0 == UInt8(ascii: "\"") }
        if composite == false && (byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || Self.isSpace(byte)) {
            try member(String(decoding: key, as: UTF8.self), current)
            current = []
            place = .afterMember
            return try step(byte, element: element, member: member)
        }
        try append(byte)
        if composite == true && depth == 0 && !inString {
            try member(String(decoding: key, as: UTF8.self), current)
            current = []
            place = .afterMember
        }
    }

    /// Appends a byte of an element or value, tracking strings and nesting.
    private mutating func append(_ byte: UInt8) throws {
        guard current.count < elementBytesMax else {
            throw problem("a document is larger than \(elementBytesMax) bytes")
        }
        current.append(byte)
        if inString {
            if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
            return
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
        case UInt8(ascii: "}"), UInt8(ascii: "]"):
            guard depth > 0 else { throw problem("unbalanced \(Character(UnicodeScalar(byte)))") }
            depth -= 1
        default: break
        }
    }
}
