// A server of another language for goflux's HTTP publisher and requester: reads every
// request as Go goflux's subscriber and responder read them (transport/http) and
// answers as they answer. Prints {"port": N} once it listens on 127.0.0.1, then one
// JSON line per request it received, before it answers:
//   {"method", "rawPath", "path", "subject", "escapedAsGo", "rawHeaders",
//    "header", "gofluxHeader", "messageId", "traceparent", "traceparentValid",
//    "contentType", "body", "status"}
// "header" is Go's r.Header (canonical names, every value), "gofluxHeader" what
// extractGofluxHeaders hands the handler, "escapedAsGo" whether the path's last part
// is url.PathEscape of the subject. Serves until its stdin closes.
//
// Routes, as a Go mux with a subscriber at /hooks and a responder at /api would:
//   POST /hooks/{subject}  204; 400 "bad request" for a body that is no JSON;
//                          500 "internal server error" for a subject ending ".fail"
//   POST /api/{subject}    200 and {"sku", "total": 2.5 * quantity} as
//                          application/json; 400 "bad request"; 500 for ".fail"
//   another method         405 "method not allowed"
//   any other path         404 "404 page not found"
// Usage: node http_go_server.mjs
import http from "node:http";
import {
  GoHeader,
  TRACEPARENT,
  extractGofluxHeaders,
  httpError,
  pathEscape,
} from "./go_http.mjs";

const MAX_BODY_SIZE = 1 << 20; // Go goflux's DefaultMaxBodySize

function route(rawPath) {
  for (const base of ["/hooks/", "/api/"]) {
    if (rawPath.startsWith(base)) {
      const escaped = rawPath.slice(base.length);
      return { base, escaped, subject: decodeURIComponent(escaped) };
    }
  }
  return null;
}

async function readBody(request) {
  const chunks = [];
  for await (const chunk of request) {
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function decodeJson(body) {
  try {
    return { ok: true, value: JSON.parse(body.toString("utf8")) };
  } catch {
    return { ok: false };
  }
}

function answer(found, method, body) {
  if (found === null) {
    return { status: 404, text: "404 page not found" };
  }
  if (method !== "POST") {
    return { status: 405, text: "method not allowed" };
  }
  if (body.length > MAX_BODY_SIZE) {
    return { status: 413, text: "request body too large" };
  }
  const decoded = decodeJson(body);
  if (!decoded.ok) {
    return { status: 400, text: "bad request" };
  }
  if (found.subject.endsWith(".fail")) {
    return { status: 500, text: "internal server error" };
  }
  if (found.base === "/hooks/") {
    return { status: 204 };
  }
  const { sku, quantity } = decoded.value;
  return { status: 200, reply: JSON.stringify({ sku, total: 2.5 * quantity }) };
}

const server = http.createServer(async (request, response) => {
  const body = await readBody(request);
  const header = GoHeader.fromRawHeaders(request.rawHeaders);
  const rawPath = request.url.split("?", 1)[0];
  const found = route(rawPath);
  const traceparent = header.get("Traceparent");
  const result = answer(found, request.method, body);
  const seen = {
    method: request.method,
    rawPath,
    path: decodeURIComponent(rawPath), // Go's r.URL.Path
    subject: found?.subject ?? null,
    escapedAsGo: found !== null && pathEscape(found.subject) === found.escaped,
    rawHeaders: request.rawHeaders,
    header: header.toObject(),
    gofluxHeader: extractGofluxHeaders(header),
    messageId: header.get("X-Message-ID"),
    traceparent,
    traceparentValid: TRACEPARENT.test(traceparent),
    contentType: header.get("Content-Type"),
    body: body.toString("utf8"),
    status: result.status,
  };
  console.log(JSON.stringify(seen));
  if (result.reply !== undefined) {
    response.writeHead(200, { "Content-Type": "application/json" });
    response.end(result.reply);
  } else if (result.status === 204) {
    response.writeHead(204);
    response.end();
  } else {
    httpError(response, result.text, result.status);
  }
});

server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});

process.stdin.resume();
process.stdin.on("end", () => {
  server.close();
  server.closeAllConnections();
});
