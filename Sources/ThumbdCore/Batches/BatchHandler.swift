import HTTPServer

/// `POST /batches`, `GET /batches/<id>`, `GET /batches/<id>/events`, `DELETE /batches/<id>`,
/// `POST /batches/<id>/focus`, `POST /batches/<id>/items`.
struct BatchHandler: Sendable {
    let registry: BatchRegistry
    let maxItems: Int

    func handle(_ request: Request, context: RequestContext, requestID: String? = nil) -> HandlerResult {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true)  // ["batches", id, "events"]
        switch (request.method, parts.count) {
        case ("POST", 1):
            return .response(create(request, requestID: requestID))
        case (_, 1):
            return .response(Router.notAllowed("POST"))
        case ("GET", 2), ("HEAD", 2):
            guard let batch = registry.batch(String(parts[1])) else { return .response(Self.notFound(parts[1])) }
            return .response(.json(200, batch.snapshot(), headers: [("Cache-Control", "no-store")]))
        case ("DELETE", 2):
            guard let batch = registry.batch(String(parts[1])) else { return .response(Self.notFound(parts[1])) }
            registry.cancel(batch)
            return .response(.json(200, batch.snapshot(), headers: [("Cache-Control", "no-store")]))
        case (_, 2):
            return .response(Router.notAllowed("GET, HEAD, DELETE"))
        case ("GET", 3) where parts[2] == "events":
            guard let batch = registry.batch(String(parts[1])) else { return .response(Self.notFound(parts[1])) }
            let lastEventID = (request.headers["last-event-id"] ?? request.query["lastEventId"]).flatMap { Int($0) }
            let subscriber = registry.subscribe(batch, lastEventID: lastEventID)
            return .response(Response(status: 200, headers: Self.eventStreamHeaders, stream: subscriber))
        case (_, 3) where parts[2] == "events":
            return .response(Router.notAllowed("GET"))
        case ("POST", 3) where parts[2] == "focus":
            guard let batch = registry.batch(String(parts[1])) else { return .response(Self.notFound(parts[1])) }
            do {
                let indices = try BatchRequest.focus(body: request.body, of: batch.count)
                registry.focus(batch, on: indices)
                return .response(Response(status: 204, headers: [("Cache-Control", "no-store")]))
            } catch {
                return .response(.error(error))
            }
        case (_, 3) where parts[2] == "focus":
            return .response(Router.notAllowed("POST"))
        case ("POST", 3) where parts[2] == "items":
            guard let batch = registry.batch(String(parts[1])) else { return .response(Self.notFound(parts[1])) }
            do {
                let added = try registry.add(request.body, to: batch, requestID: requestID)
                return .response(.json(200, added, headers: [("Cache-Control", "no-store")]))
            } catch {
                return .response(.error(error))
            }
        case (_, 3) where parts[2] == "items":
            return .response(Router.notAllowed("POST"))
        default:
            return .response(.error(ThumbdError(.notFound, "no route for \(request.path)")))
        }
    }

    private func create(_ request: Request, requestID: String?) -> Response {
        do {
            var parsed = try BatchRequest(body: request.body, maxItems: maxItems, presets: registry.variants.presets)
            // A browser sends Origin; a foreign one was refused before this (RequestGuard), and
            // a page cannot forge it. Equal to the Host: thumbd's own page.
            if let origin = request.headers["origin"], let host = request.headers["host"] {
                parsed.fromOwnPage = origin.lowercased() == "http://" + host.lowercased()
            }
            let batch = try registry.create(parsed, accept: request.headers["accept"],
                                            requestID: requestID, body: request.body)
            return .json(201, batch.created(log: true), headers: [("Location", "/batches/\(batch.id)"), ("Cache-Control", "no-store")])
        } catch {
            return .error(error)
        }
    }

    /// One array for every event stream: an array literal here would be a new array per
    /// stream, held for the stream's life (by the access log's record of what was sent).
    private static let eventStreamHeaders = [
        // No charset: an event stream is UTF-8 by definition, and the type's registration
        // says the parameter "serves no purpose"; libmicrohttpd holds each byte of a header
        // for the stream's life.
        ("Content-Type", "text/event-stream"),
        ("Cache-Control", "no-cache"),
        ("X-Accel-Buffering", "no"),  // tells nginx-style proxies not to buffer the stream
    ]

    private static func notFound(_ id: Substring) -> Response {
        .error(ThumbdError(.batchNotFound, "no batch \(id) (finished batches are kept for a while only)"))
    }
}
