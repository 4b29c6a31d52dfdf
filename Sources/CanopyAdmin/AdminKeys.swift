/// How the admin protocol names members: Swift's camel case becomes the protocol's snake case
/// (`lastPushedSeq` → `last_pushed_seq`, `nodeID` → `node_id`: a run of capitals is one word),
/// the same rule as Foundation's `JSONEncoder.KeyEncodingStrategy.convertToSnakeCase`. Keys
/// of string-keyed dictionaries are data, never converted.
package enum AdminKeys {
    /// `key` in snake case. Every request, reply and event converts each of its member names:
    /// names without a capital (most of them) are returned as they are, ASCII ones are converted
    /// byte by byte.
    package static func snakeCase(_ key: String) -> String {
        guard key.utf8.contains(where: { (65...90).contains($0) }) else { return key }
        guard key.utf8.allSatisfy({ $0 < 128 }) else { return snakeCaseCharacters(key) }
        let bytes = Array(key.utf8)
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count + 4)
        for (index, byte) in bytes.enumerated() {
            let upper = (65...90).contains(byte)
            if upper, index > 0 {
                let previous = bytes[index - 1]
                let previousUpper = (65...90).contains(previous)
                let nextLower = index + 1 < bytes.count && (97...122).contains(bytes[index + 1])
                // As in `snakeCaseCharacters`.
                if !previousUpper && previous != UInt8(ascii: "_") || previousUpper && nextLower { result.append(UInt8(ascii: "_")) }
            }
            result.append(upper ? byte + 32 : byte)
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// `snakeCase` for any characters.
    package static func snakeCaseCharacters(_ key: String) -> String {
        let characters = Array(key)
        guard characters.contains(where: \.isUppercase) else { return key }
        var result = ""
        result.reserveCapacity(key.utf8.count + 4)
        for (index, character) in characters.enumerated() {
            if character.isUppercase, index > 0 {
                let previous = characters[index - 1]
                let next = index + 1 < characters.count ? characters[index + 1] : nil
                // A word starts at a capital after a lower-case letter or digit, or at the last
                // capital of a run that a lower-case letter follows (`URLPath` → `url_path`).
                if !previous.isUppercase && previous != "_" || previous.isUppercase && next?.isLowercase == true {
                    result.append("_")
                }
            }
            result.append(contentsOf: character.lowercased())
        }
        return result
    }
}
