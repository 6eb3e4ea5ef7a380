// Encodes and decodes payloads with npm packages no one here wrote, for goflux's codec
// interop tests (tests/codecs/test_node_interop.py).
//
//   node codecs.mjs decode FORMAT IN [ARRAYS]       prints the value IN holds, as tagged JSON
//   node codecs.mjs encode FORMAT IN OUT [ROOT]     writes OUT: the tagged JSON in IN, encoded
//   node codecs.mjs recode FORMAT IN OUT            decodes IN and encodes it again into OUT
//   node codecs.mjs --serve                         each of them, asked on stdin (serve.mjs)
//
// FORMAT: msgpack (@msgpack/msgpack), yaml (js-yaml 5, YAML 1.2), toml (smol-toml),
// xml (fast-xml-parser; ARRAYS is a comma-separated list of element names that are
// lists; ROOT the root element's name). Tagged JSON carries what JSON cannot:
// {"$bytes": base64}, {"$date": ISO 8601}, {"$float": "NaN" | "Infinity" | "-Infinity"}.
// The last line printed is JSON.
import { readFileSync, writeFileSync } from "node:fs";
import { decode as msgpackDecode, encode as msgpackEncode } from "@msgpack/msgpack";
import { XMLBuilder, XMLParser } from "fast-xml-parser";
import * as yaml from "js-yaml";
import { parse as tomlParse, stringify as tomlStringify } from "smol-toml";
import { serve } from "./serve.mjs";

function tag(value) {
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value).toString("base64") };
  if (value instanceof Date) return { $date: value.toISOString() };
  if (typeof value === "number" && !Number.isFinite(value)) return { $float: String(value) };
  if (typeof value === "bigint") return Number(value);
  if (Array.isArray(value)) return value.map(tag);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, tag(v)]));
  }
  return value;
}

function untag(value) {
  if (Array.isArray(value)) return value.map(untag);
  if (value !== null && typeof value === "object") {
    if ("$bytes" in value) return new Uint8Array(Buffer.from(value.$bytes, "base64"));
    if ("$date" in value) return new Date(value.$date);
    if ("$float" in value) return Number(value.$float);
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, untag(v)]));
  }
  return value;
}

function decode(format, bytes, arrays) {
  switch (format) {
    case "msgpack":
      return msgpackDecode(bytes);
    case "yaml":
      return yaml.load(bytes.toString("utf8"));
    case "toml":
      return tomlParse(bytes.toString("utf8"));
    case "xml":
      return new XMLParser({
        parseTagValue: false,
        trimValues: false,
        // Character references (&#34;, &#xA;, as Go's encoding/xml writes them) are
        // XML 1.0; fast-xml-parser reads them only with this option.
        htmlEntities: true,
        isArray: (name) => arrays.includes(name),
      }).parse(bytes.toString("utf8"));
    default:
      throw new Error(`unknown format ${format}`);
  }
}

function encode(format, value, root) {
  switch (format) {
    case "msgpack":
      return Buffer.from(msgpackEncode(value));
    case "yaml":
      return Buffer.from(yaml.dump(value), "utf8");
    case "toml":
      return Buffer.from(tomlStringify(value), "utf8");
    case "xml":
      return Buffer.from(new XMLBuilder({}).build(root ? { [root]: value } : value), "utf8");
    default:
      throw new Error(`unknown format ${format}`);
  }
}

function run([command, format, input, output, extra]) {
  const bytes = readFileSync(input);
  if (command === "decode") {
    const arrays = output ? output.split(",") : [];
    return tag(decode(format, bytes, arrays));
  } else if (command === "encode") {
    writeFileSync(output, encode(format, untag(JSON.parse(bytes.toString("utf8"))), extra));
    return { ok: true };
  } else if (command === "recode") {
    writeFileSync(output, encode(format, decode(format, bytes, [])));
    return { ok: true };
  }
  throw new Error(`unknown command ${command}`);
}

if (process.argv[2] === "--serve") {
  await serve(run);
} else {
  console.log(JSON.stringify(run(process.argv.slice(2))));
}
