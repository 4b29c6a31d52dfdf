import Dispatch
import Foundation
import Testing

@testable import CanopyAgent

#if canImport(Glibc)
import Glibc
#endif

/// What a connection's handlers saw, written on its queue and read after `closed` is signalled.
private final class ReadLog: @unchecked Sendable {
    private let lock = NSLock()
    private var bytes: [UInt8] = []
    private var chunks = 0
    private var closes = 0
    let closed = DispatchSemaphore(value: 0)

    func read(_ chunk: ArraySlice<UInt8>) { lock.withLock { bytes.append(contentsOf: chunk); chunks += 1 } }
    func close() {
        lock.withLock { closes += 1 }
        closed.signal()
    }
    var snapshot: (bytes: [UInt8], chunks: Int, closes: Int) { lock.withLock { (bytes, chunks, closes) } }
}

/// A connected socket pair, both ends non-blocking: the first for a `StreamConnection`, the
/// second for the test to write.
private func socketPair() throws -> (reading: Int32, writing: Int32) {
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { throw SystemError("socketpair") }
    for fd in fds { try Socket.setNonBlocking(fd) }
    return (fds[0], fds[1])
}

/// Writes `bytes` to the non-blocking `fd` now; they must fit in the socket's buffer.
private func writeNow(_ bytes: [UInt8], to fd: Int32) {
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    #expect(written == bytes.count, "the socket buffer took \(written) of \(bytes.count) bytes")
}

/// Test bytes: not one value repeated, so a reordered or repeated chunk shows.
private func pattern(_ count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
}

/// The index of the first byte where `seen` and `expected` differ (or where one ends), nil when
/// they are equal; a failed expectation shows this, not two megabytes of array.
private func firstDifference(_ seen: [UInt8], _ expected: [UInt8]) -> Int? {
    if let index = zip(seen, expected).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset { return index }
    return seen.count == expected.count ? nil : min(seen.count, expected.count)
}

@Suite("a stream connection reading a real socket")
struct StreamConnectionTests {
    private static let chunk = 4_096

    /// A connection on `reading` with small chunks, started on a queue of its own.
    private static func started(_ reading: Int32, readsPerEvent: Int, log: ReadLog) -> (StreamConnection, DispatchQueue) {
        let queue = DispatchQueue(label: "test.stream")
        let connection = StreamConnection(
            fd: reading, queue: queue, pendingWriteBytesMax: 1 << 20, readChunkBytes: chunk, readsPerEvent: readsPerEvent)
        queue.sync { connection.start(onRead: log.read, onClose: log.close) }
        return (connection, queue)
    }

    @Test("bytes and the end of stream already waiting when reading starts: all bytes in order, then the close",
          arguments: [
              (readsPerEvent: 64, bytes: 10 * chunk + 123),  // the event drains the socket
              (readsPerEvent: 4, bytes: 4 * chunk),  // the limit is reached exactly at the end
              (readsPerEvent: 4, bytes: 10 * chunk + 123),  // several events, the last partial
          ])
    func waitingBytesThenEnd(readsPerEvent: Int, bytes count: Int) throws {
        let (reading, writing) = try socketPair()
        let sent = pattern(count)
        writeNow(sent, to: writing)
        close(writing)
        let log = ReadLog()
        let (connection, queue) = Self.started(reading, readsPerEvent: readsPerEvent, log: log)
        defer { queue.sync { connection.close() } }
        #expect(log.closed.wait(timeout: .now() + 30) == .success, "the end of stream was not noticed")
        let seen = log.snapshot
        #expect(seen.bytes.count == sent.count)
        #expect(firstDifference(seen.bytes, sent) == nil)
        #expect(seen.chunks == (count + Self.chunk - 1) / Self.chunk)
        #expect(seen.closes == 1)
    }

    @Test("bytes written while reading, more than the socket holds at once, arrive whole and in order, then the close")
    func streamThenEnd() throws {
        let (reading, writing) = try socketPair()
        let sent = pattern(3_000_000)
        let log = ReadLog()
        let (connection, queue) = Self.started(reading, readsPerEvent: 16, log: log)
        defer { queue.sync { connection.close() } }
        Thread.detachNewThread {
            var offset = 0
            var ready = pollfd(fd: writing, events: Int16(POLLOUT), revents: 0)
            while offset < sent.count {
                let count = sent[offset...].withUnsafeBytes { write(writing, $0.baseAddress, $0.count) }
                if count > 0 { offset += count } else { _ = poll(&ready, 1, 1_000) }
            }
            close(writing)
        }
        #expect(log.closed.wait(timeout: .now() + 30) == .success, "the end of stream was not noticed")
        let seen = log.snapshot
        #expect(seen.bytes.count == sent.count)
        #expect(seen.bytes.count == sent.count)
        #expect(firstDifference(seen.bytes, sent) == nil)
        #expect(seen.closes == 1)
    }

    @Test("a handler that closes the connection gets no further chunk, though more bytes wait")
    func closeInHandlerStopsReading() throws {
        let (reading, writing) = try socketPair()
        writeNow(pattern(8 * Self.chunk), to: writing)
        let log = ReadLog()
        let queue = DispatchQueue(label: "test.stream")
        let connection = StreamConnection(
            fd: reading, queue: queue, pendingWriteBytesMax: 1 << 20, readChunkBytes: Self.chunk, readsPerEvent: 16)
        queue.sync {
            connection.start(onRead: { chunk in
                log.read(chunk)
                connection.close()
            }, onClose: log.close)
        }
        #expect(log.closed.wait(timeout: .now() + 30) == .success)
        queue.sync {}
        let seen = log.snapshot
        #expect(seen.chunks == 1)
        #expect(firstDifference(seen.bytes, pattern(Self.chunk)) == nil)
        #expect(seen.closes == 1)
        close(writing)
    }

    @Test("with an end handler, the peer's half-close stops reading but not writing: the answer arrives, then the close")
    func halfCloseKeepsWriting() throws {
        let (reading, writing) = try socketPair()
        let request = pattern(3 * Self.chunk + 5)
        writeNow(request, to: writing)
        #expect(shutdown(writing, Int32(SHUT_WR)) == 0)
        let log = ReadLog()
        let ended = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "test.stream")
        let connection = StreamConnection(
            fd: reading, queue: queue, pendingWriteBytesMax: 1 << 20, readChunkBytes: Self.chunk, readsPerEvent: 16)
        queue.sync { connection.start(onRead: log.read, onClose: log.close, onEnd: { ended.signal() }) }
        #expect(ended.wait(timeout: .now() + 30) == .success, "the end of the peer's stream was not reported")
        #expect(firstDifference(log.snapshot.bytes, request) == nil)
        #expect(log.snapshot.closes == 0)
        let answer = Array("answered".utf8)
        queue.sync {
            connection.send(answer)
            connection.closeWhenFlushed()
        }
        #expect(log.closed.wait(timeout: .now() + 30) == .success)
        #expect(log.snapshot.closes == 1)
        var received = [UInt8](repeating: 0, count: 64)
        var ready = pollfd(fd: writing, events: Int16(POLLIN), revents: 0)
        _ = poll(&ready, 1, 30_000)
        let count = received.withUnsafeMutableBytes { recv(writing, $0.baseAddress, $0.count, 0) }
        #expect(count == answer.count)
        #expect(Array(received.prefix(max(count, 0))) == answer)
        _ = poll(&ready, 1, 30_000)
        #expect(received.withUnsafeMutableBytes { recv(writing, $0.baseAddress, $0.count, 0) } == 0, "the connection did not close")
        close(writing)
    }

    @Test("after the end of the peer's stream, a half-close leaves the socket writable and a close is a hang-up", arguments: [false, true])
    func hangUpAfterEnd(closesCompletely: Bool) throws {
        let (reading, writing) = try socketPair()
        let ended = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "test.stream")
        let connection = StreamConnection(fd: reading, queue: queue, pendingWriteBytesMax: 1 << 20)
        let log = ReadLog()
        queue.sync { connection.start(onRead: log.read, onClose: log.close, onEnd: { ended.signal() }) }
        if closesCompletely { close(writing) } else { #expect(shutdown(writing, Int32(SHUT_WR)) == 0) }
        #expect(ended.wait(timeout: .now() + 30) == .success)
        #expect(queue.sync { connection.peerHungUp } == closesCompletely)
        queue.sync { connection.close() }
        #expect(queue.sync { connection.peerHungUp })
        if !closesCompletely { close(writing) }
    }
}
