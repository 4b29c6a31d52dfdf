/// How the admin protocol names members: Swift's camel case becomes the protocol's snake case
/// (`lastPushedSeq` → `last_pushed_seq`, `nodeID` → `node_id`: a run of capitals is one word),
/// the same rule as Foundation's `JSONEncoder.KeyEncodingStrategy.convertToSnakeCase`. Keys
/// of string-keyed dictionaries are data, never converted.
enum AdminKeys {
    /// `key` in snake case.
    static func snakeCase(_ key: String) -> String {
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
