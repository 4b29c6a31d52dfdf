import CanopyAdmin
import CanopyAgent
import CanopyCore
import Testing

private func decode(_ text: String) -> Result<AdminRequest, AdminDecodeFailure> {
    AdminRequest.decode(Array(text.utf8))
}

private func failure(_ text: String) -> AdminDecodeFailure? {
    if case .failure(let failure) = decode(text) { return failure }
    return nil
}

@Suite("admin request decoding")
struct AdminRequestTests {
    @Test("a request's id, command and flat arguments are decoded")
    func decodesRequest() throws {
        let request = try decode(#"{"id":7,"cmd":"get","doc":"a","revs":true}"#).get()
        #expect(request == AdminRequest(id: 7, command: "get", arguments: ["doc": .string("a"), "revs": .bool(true)]))
        #expect(try request.string("doc") == "a")
        #expect(try request.bool("revs"))
        #expect(try request.bool("conflicts") == false)
    }

    @Test("malformed lines get the right error code and keep the id when there is one", arguments: [
        ("{", AdminErrorCode.parseError, nil as Int64?),
        ("[1,2]", .invalidRequest, nil),
        (#"{"cmd":"status"}"#, .invalidRequest, nil),
        (#"{"id":"1","cmd":"status"}"#, .invalidRequest, nil),
        (#"{"id":1.5,"cmd":"status"}"#, .invalidRequest, nil),
        (#"{"id":4}"#, .invalidRequest, 4),
        (#"{"id":5,"cmd":5}"#, .invalidRequest, 5),
    ])
    func malformedLines(text: String, code: AdminErrorCode, id: Int64?) {
        let found = failure(text)
        #expect(found?.failure.code == code)
        #expect(found?.id == id)
    }

    @Test("missing and wrong-typed arguments are invalid_argument errors that name the argument")
    func argumentErrors() throws {
        let request = try decode(#"{"id":1,"cmd":"put","doc":3,"body":[],"since":-1,"rev":"nope","flag":"yes"}"#).get()
        #expect(throws: AdminFailure(.invalidArgument, "\"doc\" must be a string")) { try request.string("doc") }
        #expect(throws: AdminFailure(.invalidArgument, "\"body\" must be a JSON object")) { try request.object("body") }
        #expect(throws: AdminFailure(.invalidArgument, "\"put\" needs \"missing\": a string")) { try request.string("missing") }
        #expect(throws: AdminFailure.self) { try request.optionalInt("since", in: 0...10) }
        #expect(throws: AdminFailure.self) { try request.optionalRevision("rev") }
        #expect(throws: AdminFailure(.invalidArgument, "\"flag\" must be true or false")) { try request.bool("flag") }
    }

    @Test("responses are single canonical JSON lines with the id and ok flag")
    func responsesAreLines() {
        let ok = AdminResponseLine.success(id: 3, ["rev": .string("1-x")])
        #expect(String(decoding: ok, as: UTF8.self) == #"{"id":3,"ok":true,"rev":"1-x"}"# + "\n")
        let error = AdminResponseLine.failure(id: nil, AdminFailure(.parseError, "bad"))
        #expect(String(decoding: error, as: UTF8.self) == #"{"error":{"code":"parse_error","message":"bad"},"id":null,"ok":false}"# + "\n")
    }
}
