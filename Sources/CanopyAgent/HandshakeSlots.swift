/// Who holds the peer port's handshake slots, so that no one source can take them all.
///
/// Anyone who can reach the port can open connections and stay silent until the handshake
/// times out; without a rule, one such client holding every slot keeps allowed peers out. The
/// rules (a connection is identified by a token, its source by its IP address):
///
/// - a source holds at most `perSourceMax` slots: its next connection takes the place of its own
///   oldest handshake;
/// - when every slot is taken, a new connection from a source holding fewer slots than the most
///   represented source takes the place of that source's oldest handshake; otherwise it is
///   refused.
///
/// Pure (no I/O): `admit` says which handshake, if any, the caller must abandon.
struct HandshakeSlots {
    /// What `admit` decided.
    enum Admission: Equatable {
        /// Take a slot; abandon `evicting`'s handshake first when it is set (its slot is already
        /// given back here: `finished` for it does nothing).
        case admit(evicting: Int?)
        /// Every slot is taken by sources holding no more than this one: refuse the connection.
        case refuse
    }

    let totalMax: Int
    let perSourceMax: Int
    /// Per source, its handshakes' tokens, oldest first.
    private var bySource: [String: [Int]] = [:]
    /// The source of each handshake in progress.
    private var sourceOf: [Int: String] = [:]

    init(totalMax: Int, perSourceMax: Int) {
        precondition(totalMax > 0 && perSourceMax > 0, "slot limits must be positive")
        self.totalMax = totalMax
        self.perSourceMax = perSourceMax
    }

    /// Handshakes in progress.
    var count: Int { sourceOf.count }

    /// Decides for a new connection `token` from `source`.
    mutating func admit(_ token: Int, from source: String) -> Admission {
        let held = bySource[source]?.count ?? 0
        var evicted: Int?
        if held >= perSourceMax {
            evicted = bySource[source]?.first
        } else if count >= totalMax {
            // Deterministic: the most slots, then the lowest address.
            guard let (crowded, tokens) = bySource.max(by: { ($0.value.count, $1.key) < ($1.value.count, $0.key) }),
                tokens.count > held
            else { return .refuse }
            _ = crowded
            evicted = tokens.first
        }
        if let evicted { finished(evicted) }
        bySource[source, default: []].append(token)
        sourceOf[token] = source
        return .admit(evicting: evicted)
    }

    /// The handshake `token` ended (or was abandoned): its slot is free. Returns false when it held
    /// none (it was evicted before).
    @discardableResult
    mutating func finished(_ token: Int) -> Bool {
        guard let source = sourceOf.removeValue(forKey: token) else { return false }
        bySource[source]?.removeAll { $0 == token }
        if bySource[source]?.isEmpty == true { bySource[source] = nil }
        return true
    }

    /// The source part of a `HOST:PORT` or `[v6]:PORT` address.
    static func source(of address: String) -> String {
        if address.hasPrefix("["), let close = address.firstIndex(of: "]") {
            return String(address[address.index(after: address.startIndex)..<close])
        }
        guard let colon = address.lastIndex(of: ":") else { return address }
        return String(address[..<colon])
    }
}
