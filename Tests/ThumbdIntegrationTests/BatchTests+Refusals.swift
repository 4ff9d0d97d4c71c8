import Foundation
import ThumbdCore
import ThumbdTesting
import LoopbackClient
import Support
import Testing

/// What a batch is refused for: a bad body as a whole, too many running at once.
extension BatchTests {
    @Test("bad batches are refused as a whole with the contract's JSON errors")
    func refusals() async throws {
        try await withOriginAndDaemon({
            $0.batches.maxItems = 3
            $0.server.maxBodyBytes = 4096
        }) { origin, daemon in
            func post(_ body: String) async throws -> HTTPResult { try await request(daemon.port, "/batches", method: "POST", headers: json, body: body) }
            #expect(try await post("{not json").errorCode == "malformed_json")
            #expect(try await post("[1,2]").errorCode == "malformed_json")
            #expect(try await post("{}").errorCode == "no_items")
            #expect(try await post("{\"items\":[]}").errorCode == "no_items")
            let tooMany = try await post("{\"urls\":[\"http://a/1\",\"http://a/2\",\"http://a/3\",\"http://a/4\"]}")
            #expect(tooMany.status == 413 && tooMany.errorCode == "too_many_items")
            let huge = try await post("{\"urls\":[\"http://a/\(String(repeating: "x", count: 5000))\"]}")
            #expect(huge.status == 413 && huge.errorCode == "body_too_large")
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"priority\":\"now\"}").errorCode == "bad_parameter")
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"w\":0}").errorCode == "bad_parameter")
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"fit\":[1]}").errorCode == "bad_parameter")
            // A misspelt key is refused, not ignored (it would make every tile the full-size original).
            let typo = try await post("{\"urls\":[\"http://a/1\"],\"widht\":100}")
            #expect(typo.status == 400 && typo.errorCode == "unknown_parameter")
            #expect((typo.json["message"] as? String)?.contains("did you mean w?") == true)
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"dpr\":5}").errorCode == "bad_parameter")
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"blur\":[1]}").errorCode == "bad_parameter")
            #expect(try await post("{\"urls\":[\"http://a/1\"],\"preset\":\"none\"}").errorCode == "bad_parameter")
            // Invalid UTF-8 inside a string (0xFF): JSON is UTF-8, so the body is refused.
            let invalid = try await request(daemon.port, "/batches", method: "POST", headers: json,
                                            bodyBytes: Array("{\"urls\":[\"http://a/".utf8) + [0xFF, 0xFE] + Array("\"]}".utf8))
            #expect(invalid.status == 400 && invalid.errorCode == "malformed_json")
            #expect(try await request(daemon.port, "/batches/nope").status == 404)
            #expect(try await request(daemon.port, "/batches/nope/events").status == 404)
            #expect(try await request(daemon.port, "/batches/nope", method: "DELETE").status == 404)
            #expect(try await request(daemon.port, "/batches").status == 405)
            // The daemon is still up, and the bare {"urls": [...]} form works.
            let ok = try await post("{\"urls\":[\(jsonString(origin.url("/img/ok.jpg")))]}")
            #expect(ok.status == 201)
        }
    }

    @Test("too many running batches give 503; a finished batch is forgotten after the retention time")
    func openLimitAndRetention() async throws {
        try await withOriginAndDaemon({
            $0.batches.maxOpen = 1
            // Long enough to read it once on a loaded machine (3 s was not, once in a few
            // runs of the whole suite in parallel on 2 cores).
            $0.batches.retentionSeconds = 8
            $0.batches.keepaliveSeconds = 0.1
        }) { origin, daemon in
            let running = try await daemon.createBatch([origin.url("/gate/open")])
            let refused = try await request(daemon.port, "/batches", method: "POST", headers: json, body: "{\"urls\":[\(jsonString(origin.url("/img/x.jpg")))]}")
            #expect(refused.status == 503 && refused.errorCode == "too_many_batches")
            try await origin.release("open")
            _ = try await daemon.allEvents(running.events)
            #expect(try await request(daemon.port, "/batches/\(running.id)").status == 200)
            #expect(try await eventually(20) { try await request(daemon.port, "/batches/\(running.id)").status == 404 })
        }
    }
}
