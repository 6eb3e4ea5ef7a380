// A client of another language for goflux's HTTP subscriber: posts requests exactly as
// Go goflux's HTTP publisher writes them (transport/http/publisher.go), and any other
// request it is given, and prints one JSON array with every answer it got:
//   [{"status": 204, "headers": {"content-type": ...}, "body": "..."}, ...]
// Usage: node http_go_client.mjs BASE_URL OPERATIONS_JSON
// OPERATIONS_JSON is an array of
//   {"publish": {"subject", "body", "header": {name: [values]}, "messageId",
//                "traceparent", "via": "fetch" | "http"}}
//       What Go's Publisher.post sends: POST {BASE_URL}/{url.PathEscape(subject)}, the
//       names canonical (Content-Type, Traceparent, X-Message-Id, X-Goflux-{Name}),
//       one line per value. "fetch" sends with Node's fetch, which joins repeated
//       values into one line, so it is refused for a header with several values;
//       "http" sends with node:http the lines in Go's order (http.Header.write).
//   {"request": {"method", "path", "headers": [[name, value]], "body"}}
//       A request sent with fetch as it is given.
import http from "node:http";
import { GoHeader, pathEscape } from "./go_http.mjs";

const [baseUrl, operations] = process.argv.slice(2);

// Go's Publisher.post: the target and the header it sets, in its order of calls.
function goPublish({ subject, header = {}, messageId, traceparent }) {
  const target = `${baseUrl}/${pathEscape(subject)}`;
  const goHeader = new GoHeader();
  goHeader.set("Content-Type", "application/json");
  if (traceparent) {
    goHeader.set("traceparent", traceparent); // propagation.HeaderCarrier.Set
  }
  if (messageId) {
    goHeader.set("X-Message-ID", messageId); // goflux.MessageIDHeader
  }
  for (const [name, values] of Object.entries(header)) {
    for (const value of values) {
      goHeader.add(`X-Goflux-${name}`, value);
    }
  }
  return { target, lines: goHeader.lines() };
}

async function viaFetch(url, method, lines, body) {
  const names = lines.map(([name]) => name.toLowerCase());
  if (new Set(names).size !== names.length) {
    throw new Error("fetch joins repeated header values into one line: use via http");
  }
  const response = await fetch(url, { method, headers: lines, body });
  return {
    status: response.status,
    headers: Object.fromEntries(response.headers),
    body: await response.text(),
  };
}

// node:http with the lines as Go's client writes them: Host, User-Agent,
// Content-Length, the header sorted, Accept-Encoding.
function viaHttp(url, lines, body) {
  const target = new URL(url);
  const data = Buffer.from(body);
  const raw = [
    ["Host", target.host],
    ["User-Agent", "Go-http-client/1.1"],
    ["Content-Length", String(data.length)],
    ...lines,
    ["Accept-Encoding", "gzip"],
  ].flat();
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: target.hostname,
        port: target.port,
        method: "POST",
        path: target.pathname,
        headers: raw,
        agent: false,
      },
      (response) => {
        const chunks = [];
        response.on("data", (chunk) => chunks.push(chunk));
        response.on("end", () =>
          resolve({
            status: response.statusCode,
            headers: response.headers,
            body: Buffer.concat(chunks).toString(),
          }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(data);
  });
}

const answers = [];
for (const operation of JSON.parse(operations)) {
  if (operation.publish) {
    const { target, lines } = goPublish(operation.publish);
    const { body, via = "fetch" } = operation.publish;
    answers.push(
      via === "http"
        ? await viaHttp(target, lines, body)
        : await viaFetch(target, "POST", lines, body),
    );
  } else {
    const { method, path, headers = [], body } = operation.request;
    answers.push(await viaFetch(`${baseUrl}${path}`, method, headers, body));
  }
}
console.log(JSON.stringify(answers));
