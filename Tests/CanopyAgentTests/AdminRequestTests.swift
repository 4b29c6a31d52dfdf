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
        let get = try request.line.command(as: Admin.GetDocument.self)
        #expect(get.doc == "a")
        #expect(get.revs == true)
        #expect(get.conflicts == nil)
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

    @Test("missing and wrong-typed arguments are invalid_argument errors that name the argument", arguments: [
        (#"{"id":1,"cmd":"put","doc":3,"body":{}}"#, "\"doc\" must be a string"),
        (#"{"id":1,"cmd":"put","doc":"a","body":[]}"#, "\"body\" must be a JSON object"),
        (#"{"id":1,"cmd":"put","body":{}}"#, "\"put\" needs \"doc\": a string"),
        (#"{"id":1,"cmd":"put","doc":"a","body":{},"rev":"nope"}"#, "\"rev\" malformed revision id"),
        (#"{"id":1,"cmd":"get","doc":"a","revs":"yes"}"#, "\"revs\" must be true or false"),
        (#"{"id":1,"cmd":"attach","doc":"a","name":"n"}"#, "\"attach\" needs \"length\": an integer"),
        (#"{"id":1,"cmd":"attach","doc":"a","name":"n","length":-1}"#, "\"length\" must be from 0"),
    ])
    func argumentErrors(text: String, message: String) throws {
        let line = try decode(text).get().line
        let failure: AdminFailure? = switch line.command {
        case Admin.PutDocument.name: refusal { try line.command(as: Admin.PutDocument.self) }
        case Admin.GetDocument.name: refusal { try line.command(as: Admin.GetDocument.self) }
        default: refusal { try line.command(as: Admin.Attach.self) }
        }
        #expect(failure?.code == .invalidArgument)
        #expect(failure?.message.hasPrefix(message) == true, "\(failure?.message ?? "no failure")")
    }

    @Test("responses are single canonical JSON lines with the id and ok flag")
    func responsesAreLines() {
        let ok = AdminResponseLine.success(id: 3, ["rev": .string("1-x")])
        #expect(String(decoding: ok, as: UTF8.self) == #"{"id":3,"ok":true,"rev":"1-x"}"# + "\n")
        let error = AdminResponseLine.failure(id: nil, AdminFailure(.parseError, "bad"))
        #expect(String(decoding: error, as: UTF8.self) == #"{"error":{"code":"parse_error","message":"bad"},"id":null,"ok":false}"# + "\n")
    }
}

private func refusal<C>(_ decode: () throws -> C) -> AdminFailure? {
    do {
        _ = try decode()
        return nil
    } catch {
        return error as? AdminFailure
    }
}
