import CanopyAdmin
import CanopyCore

/// What a `put` body may say about its own document, in CouchDB's terms: the top-level members
/// whose names start with `_` are metadata, not content. `_id` must name the document being
/// written and `_rev` is the revision replaced (the `rev` argument's twin); both are taken out of
/// the stored body. `_attachments` stays: the stubs of content already stored (as `get` shows
/// them), checked by the store. Any other `_` member is refused, as CouchDB refuses unknown
/// special members, rather than stored where `get` would hide it behind the metadata of the same
/// name.
///
/// `canopyctl` applies the same rules before it sends a body, so a refused one is a usage error there.
package struct DocumentMembers {
    /// The body without `_id` and `_rev`.
    package var body: JSONValue
    /// The revision the write replaces: `rev` or the body's `_rev` (which must agree).
    package var replacing: RevisionID?

    /// Ids with this prefix name local documents (`DocumentStore.localPut`), which never
    /// replicate and have no revisions, as CouchDB's `_local/` documents never replicate.
    package static let localPrefix = "_local/"

    /// Whether `id` names a local document.
    package static func isLocal(_ id: String) -> Bool { id.hasPrefix(localPrefix) }

    /// Checks and strips the special members of a `put` body written to `documentID`, with the
    /// request's `rev` argument.
    /// A nil `documentID` (not known yet) lets any string `_id` through.
    package init(body: JSONValue, documentID: String?, rev: RevisionID?) throws(AdminFailure) {
        guard case .object(var members) = body else { throw AdminFailure(.invalidArgument, "\"body\" must be a JSON object") }
        let shown = (documentID ?? "").prefix(80)
        if let id = members.removeValue(forKey: "_id") {
            guard case .string(let text) = id, text == documentID ?? text else {
                throw AdminFailure(
                    .invalidArgument,
                    "the body's _id \(Self.shown(id)) is not the document id \"\(shown)\"; remove _id from the body or make it match")
            }
        }
        var replacing = rev
        if let value = members.removeValue(forKey: "_rev") {
            guard case .string(let text) = value, let bodyRevision = RevisionID(text) else {
                throw AdminFailure(.invalidArgument, "the body's _rev \(Self.shown(value)) is not a revision id (N-<32 hex>)")
            }
            if let rev, rev != bodyRevision {
                throw AdminFailure(
                    .invalidArgument, "the body's _rev \(bodyRevision) and the rev argument \(rev) differ; give one of them")
            }
            replacing = bodyRevision
        }
        if let special = members.keys.filter({ $0.hasPrefix("_") && $0 != Attachments.member }).sorted().first {
            let advice = special == "_deleted" ? "to delete a document use delete" : "rename it (names starting with _ are document metadata)"
            throw AdminFailure(.invalidArgument, "the body's top-level member \"\(special.prefix(80))\" is not allowed; \(advice)")
        }
        self.body = .object(members)
        self.replacing = replacing
    }

    /// A resolution's merged body: the same rules, and no `_rev` (a resolution replaces every
    /// open leaf, not one revision).
    package static func resolutionBody(_ body: JSONValue, documentID: String?) throws(AdminFailure) -> JSONValue {
        let members = try DocumentMembers(body: body, documentID: documentID, rev: nil)
        guard members.replacing == nil else {
            throw AdminFailure(.invalidArgument, "a resolution's body has no _rev: it replaces every open leaf; remove _rev")
        }
        return members.body
    }

    private static func shown(_ value: JSONValue) -> String {
        String(decoding: CanonicalJSON.encode(value).prefix(80), as: UTF8.self)
    }
}
