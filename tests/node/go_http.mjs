// Go's net/http and net/url rules, ported line by line, for the peers that talk to
// goflux's HTTP transport the way Go goflux does (transport/http in foomo/goflux):
// header names canonicalised as textproto.CanonicalMIMEHeaderKey, http.Header with
// Set/Add/Get/Values, url.PathEscape, http.Error, and goflux's extractGofluxHeaders.
// Built-ins only.

// textproto's validHeaderFieldByte: the token characters of RFC 7230.
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]$/;

// textproto.CanonicalMIMEHeaderKey: "x-goflux-tenant-id" -> "X-Goflux-Tenant-Id"; a
// name holding a character that is no token character is returned unchanged.
export function canonicalHeaderKey(name) {
  for (const c of name) {
    if (!TOKEN.test(c)) {
      return name;
    }
  }
  let upper = true;
  let out = "";
  for (const c of name) {
    out += upper ? c.toUpperCase() : c.toLowerCase();
    upper = c === "-";
  }
  return out;
}

// http.Header: canonical name -> values, in the order names were first added.
export class GoHeader {
  constructor() {
    this.map = new Map();
  }

  set(name, value) {
    this.map.set(canonicalHeaderKey(name), [value]);
  }

  add(name, value) {
    const key = canonicalHeaderKey(name);
    this.map.set(key, [...(this.map.get(key) ?? []), value]);
  }

  get(name) {
    return this.map.get(canonicalHeaderKey(name))?.[0] ?? "";
  }

  values(name) {
    return this.map.get(canonicalHeaderKey(name)) ?? [];
  }

  // What Go's server makes of the header lines a request came with.
  static fromRawHeaders(rawHeaders) {
    const header = new GoHeader();
    for (let i = 0; i < rawHeaders.length; i += 2) {
      header.add(rawHeaders[i], rawHeaders[i + 1]);
    }
    return header;
  }

  // The lines Go's client writes: one per value, names sorted (http.Header.write).
  lines() {
    const keys = [...this.map.keys()].sort();
    return keys.flatMap((key) => this.map.get(key).map((value) => [key, value]));
  }

  toObject() {
    return Object.fromEntries(this.map);
  }
}

const GOFLUX_HEADER_PREFIX = "X-Goflux-";

// goflux's extractGofluxHeaders (transport/http/subscriber.go): the X-Goflux-* headers
// with the prefix stripped (of the canonical name), or null when there are none.
export function extractGofluxHeaders(header) {
  let out = null;
  for (const [key, values] of header.map) {
    if (key.startsWith(GOFLUX_HEADER_PREFIX)) {
      out ??= {};
      out[key.slice(GOFLUX_HEADER_PREFIX.length)] = values;
    }
  }
  return out;
}

// url.shouldEscape(c, encodePathSegment), for one byte.
function shouldEscapeInSegment(c) {
  const ch = String.fromCharCode(c);
  if (/[A-Za-z0-9]/.test(ch)) {
    return false;
  }
  if ("-_.~".includes(ch)) {
    return false;
  }
  if ("$&+,/:;=?@".includes(ch)) {
    return "/;,?".includes(ch);
  }
  return true;
}

// url.PathEscape: every UTF-8 byte that must be escaped as %XX (upper-case hex).
export function pathEscape(text) {
  let out = "";
  for (const byte of new TextEncoder().encode(text)) {
    out += shouldEscapeInSegment(byte)
      ? `%${byte.toString(16).toUpperCase().padStart(2, "0")}`
      : String.fromCharCode(byte);
  }
  return out;
}

// http.Error: the text and a newline, as plain text the browser must not sniff.
export function httpError(response, text, status) {
  response.writeHead(status, {
    "Content-Type": "text/plain; charset=utf-8",
    "X-Content-Type-Options": "nosniff",
  });
  response.end(`${text}\n`);
}

// The W3C traceparent Go's propagator writes: version 00, trace ID, span ID, flags.
export const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;
