import CanopyAdmin
import CanopyCore

extension ResolutionDecision {
    /// The resolution a `resolver.answer` request carries for this decision: `pick`, `body` or
    /// `delete` (§5).
    var resolution: Admin.Resolution {
        switch self {
        case .keep(let revision): Admin.Resolution(pick: revision)
        case .merged(let body): Admin.Resolution(body: body)
        case .delete: Admin.Resolution(delete: true)
        }
    }
}
