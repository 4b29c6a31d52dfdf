import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A connected, non-blocking stream socket driven by Dispatch read and write sources.
///
/// Invariants: all state is touched only on `queue` (a serial queue the owner provides, so the
/// owner's own state and this connection's share one lock-free context). Bytes passed to `send`
/// are written in order; at most `pendingWriteBytesMax` may wait, beyond that the connection is
/// closed as the client is not reading. The descriptor is closed exactly once, when the cancel
/// handlers of both sources have run (`DescriptorCloser`).
final class StreamConnection: @unchecked Sendable {
    /// Called on `queue` with each chunk read: a slice of the connection's read buffer, valid
    /// only during the call (the handler copies what it keeps; the next read reuses the buffer).
    typealias ReadHandler = (ArraySlice<UInt8>) -> Void
    /// Called on `queue` once, when the connection has closed for any reason.
    typealias CloseHandler = () -> Void
    /// Called on `queue` once, when the peer has finished sending (end of stream) on a connection
    /// that keeps writing after that (see `start`).
    typealias EndHandler = () -> Void

    let fd: Int32
    let queue: DispatchQueue
    private let pendingWriteBytesMax: Int
    private let traffic: TrafficCounters?
    /// Shared with the other connections of the same kind (admin clients): bounds their queued
    /// bytes together.
    private let writeBudget: PendingWriteBudget?
    /// The connection streams (an `events` subscriber): the write budget cuts streams first.
    /// Must be set on `queue`.
    var isStream = false
    private var readSource: (any DispatchSourceRead)?
    private var writeSource: (any DispatchSourceWrite)?
    private var writeSuspended = true
    private var pending: [UInt8] = []
    private var pendingOffset = 0
    private var closeAfterFlush = false
    private(set) var isClosed = false
    private var onRead: ReadHandler = { _ in }
    private var onClose: CloseHandler = {}
    private var onEnd: EndHandler?
    /// Called once everything queued has been written (`whenDrained`).
    private var onDrained: (@Sendable () -> Void)?
    /// True once the peer's end of stream was read with an `onEnd` handler: reading has stopped,
    /// writing goes on.
    private var readEnded = false
    /// The owner asked for no more reads for now (`pauseReading`).
    private var readPaused = false
    /// The read source is suspended (it must be resumed before it is cancelled).
    private var readSuspended = false
    /// Reused by every read, and lent to `onRead` without a copy (allocating and zeroing a fresh
    /// chunk per read cost more than reading into this one).
    private var readBuffer: [UInt8]
    /// Chunks read before `readAvailable` yields the queue (`AgentLimits.socketReadsPerEvent`).
    private let readsPerEvent: Int

    /// Wraps `fd`, which must already be non-blocking. Nothing happens until `start`. Bytes read
    /// and written are added to `traffic` when given. Reads are `readChunkBytes` each, at most
    /// `readsPerEvent` of them per readiness event. With `writeBudget`, the bytes queued count
    /// against it too, and the budget may close the connection.
    init(
        fd: Int32, queue: DispatchQueue, pendingWriteBytesMax: Int, traffic: TrafficCounters? = nil,
        writeBudget: PendingWriteBudget? = nil, readChunkBytes: Int = AgentLimits.socketReadChunkBytes, readsPerEvent: Int = AgentLimits.socketReadsPerEvent
    ) {
        precondition(readChunkBytes > 0 && readsPerEvent > 0, "a connection must read")
        self.readBuffer = [UInt8](repeating: 0, count: readChunkBytes)
        self.readsPerEvent = readsPerEvent
        self.fd = fd
        self.queue = queue
        self.pendingWriteBytesMax = pendingWriteBytesMax
        self.traffic = traffic
        self.writeBudget = writeBudget
    }

    /// Starts reading. Must be called on `queue`. Without `onEnd` the connection closes when the
    /// peer's stream ends; with it, reading stops there, `onEnd` is called, and the connection
    /// stays open for writing until `close` or `closeWhenFlushed` (a client that half-closed
    /// after its requests still gets the answers).
    func start(onRead: @escaping ReadHandler, onClose: @escaping CloseHandler, onEnd: EndHandler? = nil) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.onRead = onRead
        self.onClose = onClose
        self.onEnd = onEnd
        let fd = self.fd
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        read.setEventHandler { [weak self] in self?.readAvailable() }
        let closer = DescriptorCloser(fd: fd, sources: 2)
        read.setCancelHandler { closer.sourceCancelled() }
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        write.setEventHandler { [weak self] in self?.flush() }
        write.setCancelHandler { closer.sourceCancelled() }
        readSource = read
        writeSource = write
        read.resume()
    }

    /// Hands the connection to a new owner (a handshake hands it to the secure channel). Must be
    /// called on `queue`; bytes read afterwards go to the new handler, and the end of the peer's
    /// stream closes the connection.
    func replaceHandlers(onRead: @escaping ReadHandler, onClose: @escaping CloseHandler) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isClosed else { return onClose() }
        self.onRead = onRead
        self.onClose = onClose
        self.onEnd = nil
    }

    /// True when the peer has closed its socket completely, not only its sending side: a Unix
    /// socket then reports a hang-up (`POLLHUP`), while after a half-close it stays writable.
    /// (TCP reports no hang-up before a write fails.) Must be called on `queue`.
    var peerHungUp: Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isClosed else { return true }
        var state = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        return poll(&state, 1, 0) == 1 && state.revents & Int16(POLLHUP | POLLERR) != 0
    }

    /// Whether the connection reads what the peer sends (open and not paused). On `queue`.
    var isReading: Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return !readPaused && !isClosed
    }

    /// Stops reading until `resumeReading`: what the peer sends waits in the socket (and, once
    /// that is full, in the peer), so the owner bounds what it holds. Must be called on `queue`.
    func pauseReading() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !readPaused, !isClosed else { return }
        readPaused = true
        if !readEnded, let readSource {
            readSource.suspend()
            readSuspended = true
        }
    }

    /// Reads again after `pauseReading`, at once: bytes that arrived meanwhile are not left for
    /// the read source, which may not report them (see `readAvailable`). Must be called on `queue`.
    func resumeReading() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard readPaused, !isClosed else { return }
        readPaused = false
        if readSuspended {
            readSuspended = false
            readSource?.resume()
        }
        queue.async { [weak self] in self?.readAvailable() }
    }

    /// Queues bytes for writing. Must be called on `queue`. Ignored after close.
    func send(_ bytes: [UInt8]) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isClosed, !closeAfterFlush else { return }
        guard pending.count - pendingOffset + bytes.count <= pendingWriteBytesMax else {
            close()
            return
        }
        var written = 0
        if pendingOffset == pending.count {
            // Nothing queued: write straight from `bytes` and queue only what the socket refused.
            guard let count = writeNow(bytes[...]) else { return }
            written = count
        }
        if written < bytes.count {
            pending.append(contentsOf: bytes[written...])
            flush()
            reportPending()
        }
    }

    /// Calls `handler` on `queue` once every byte queued so far has been written (at the next
    /// turn of the queue when nothing is queued): a sender of a long body queues a part at a time
    /// and the next when the socket took the last. Not called if the connection closes first.
    func whenDrained(_ handler: @escaping @Sendable () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isClosed else { return }
        if pendingOffset == pending.count {
            queue.async { [weak self] in if self?.isClosed == false { handler() } }
        } else {
            onDrained = handler
        }
    }

    /// Closes once everything queued has been written (used after a final error response).
    func closeWhenFlushed() {
        dispatchPrecondition(condition: .onQueue(queue))
        closeAfterFlush = true
        if pendingOffset == pending.count { close() }
    }

    /// Closes now, dropping unwritten bytes. Must be called on `queue`. Idempotent.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !isClosed else { return }
        isClosed = true
        if let writeSource {
            if writeSuspended { writeSource.resume() }  // a suspended source cannot be cancelled cleanly
            writeSource.cancel()
        }
        if readSuspended {
            readSuspended = false
            readSource?.resume()
        }
        readSource?.cancel()
        if readSource == nil { Glibc.close(fd) }
        readSource = nil
        writeSource = nil
        pending = []
        onDrained = nil
        writeBudget?.remove(ObjectIdentifier(self))
        let handler = onClose
        onClose = {}
        onRead = { _ in }
        onEnd = nil
        handler()
    }

    /// Reads what the socket holds, a chunk at a time, until it has nothing more (EAGAIN) or the
    /// stream ends; after `readsPerEvent` chunks it yields the queue and goes on in a block of
    /// its own. It never leaves bytes for the read source to report: on Linux, once the peer has
    /// closed, Dispatch's source fires neither for bytes left unread after an event nor for the end
    /// of stream, so a peer that wrote and closed at once had its last bytes and its close ignored
    /// (found only by the heartbeat). Reading on while chunks keep coming also saves the source's
    /// re-arm and a thread wake-up per chunk.
    private func readAvailable() {
        guard !isClosed, !readEnded, !readPaused else { return }
        for _ in 0..<readsPerEvent {
            let count = readBuffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                traffic?.addReceived(count)
                onRead(readBuffer[0..<count])
                guard !isClosed, !readPaused else { return }
            } else if count < 0 && errno == EINTR {
                continue
            } else if count == 0, let handler = onEnd {
                readEnded = true
                onEnd = nil
                readSource?.cancel()  // stays referenced; `close` cancels the write source too
                handler()
                return
            } else {
                if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { close() }
                return
            }
        }
        queue.async { [weak self] in self?.readAvailable() }
    }

    /// Writes as much of `bytes` as the socket takes now; returns how much, or nil when the
    /// connection failed and was closed.
    private func writeNow(_ bytes: ArraySlice<UInt8>) -> Int? {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let count = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count > 0 {
                traffic?.addSent(count)
                offset += count
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            if count < 0 && errno == EINTR { continue }
            close()
            return nil
        }
        return offset - bytes.startIndex
    }

    private func flush() {
        if pendingOffset < pending.count {
            guard let count = writeNow(pending[pendingOffset...]) else { return }
            pendingOffset += count
            if pendingOffset < pending.count {
                if writeSuspended { writeSuspended = false; writeSource?.resume() }
                if count > 0 { reportPending() }
                return
            }
            reportPending()
        }
        pending.removeAll(keepingCapacity: pending.count <= 64 * 1024)
        pendingOffset = 0
        if !writeSuspended { writeSuspended = true; writeSource?.suspend() }
        if closeAfterFlush { return close() }
        if let drained = onDrained {
            onDrained = nil
            drained()
        }
    }
}

extension StreamConnection {
    /// Tells the write budget how much is queued now (it may cut this connection off).
    fileprivate func reportPending() {
        guard let writeBudget, !isClosed else { return }
        let queue = self.queue
        writeBudget.update(ObjectIdentifier(self), bytes: pending.count - pendingOffset, streaming: isStream) { [weak self] in
            queue.async { [weak self] in self?.close() }
        }
    }
}

/// Closes a descriptor once every Dispatch source monitoring it has finished cancelling. A
/// source's cancellation completes asynchronously, and the descriptor may be closed only after it
/// has (dispatch_source_cancel's contract): closed when just the read source was done, its number
/// could be handed by `accept` to a new connection while the write source was still registered
/// for it, and the new connection's read source then never fired (an admin request went
/// unanswered). Both cancel handlers run on the connection's serial queue.
private final class DescriptorCloser: @unchecked Sendable {
    private let fd: Int32
    private var remaining: Int

    init(fd: Int32, sources: Int) {
        self.fd = fd
        remaining = sources
    }

    func sourceCancelled() {
        remaining -= 1
        if remaining == 0 { Glibc.close(fd) }
    }
}
