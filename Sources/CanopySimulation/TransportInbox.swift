/// The receiving side of a simulated transport: events that arrive before the handler is
/// installed wait in order, and nothing is delivered after the event that closes it.
package final class TransportInbox<Event>: @unchecked Sendable {
    private var handler: (@Sendable (Event) -> Void)?
    private var backlog: [Event] = []
    /// True once a closing event was delivered.
    package private(set) var isClosed = false

    package init() {}

    /// Installs the handler and hands it what waited.
    package func start(_ handler: @escaping @Sendable (Event) -> Void) {
        self.handler = handler
        let pending = backlog
        backlog = []
        for event in pending { handler(event) }
    }

    /// Delivers `event` (the last one when `closes`); false when the inbox was already closed.
    @discardableResult
    package func deliver(_ event: Event, closes: Bool) -> Bool {
        guard !isClosed else { return false }
        if closes { isClosed = true }
        if let handler { handler(event) } else { backlog.append(event) }
        return true
    }
}
