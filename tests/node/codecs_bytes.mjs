// Byte codecs of another language, on the same bytes as goflux.codecs: Node's own zlib
// (gzip, raw deflate, brotli), snappyjs (Snappy's block format), zstd-wasm (libzstd
// compiled to WebAssembly) and fzstd (a zstd decoder of its own), and Buffer's base64,
// base64url and hex.
// Usage: node codecs_bytes.mjs DIR
// DIR holds NAME.raw (a payload) and FORMAT.NAME.py (what goflux wrote for it). For each
// FORMAT.NAME.py this decodes it and compares it with NAME.raw; for each NAME.raw it
// writes FORMAT.NAME.node (what Node writes) for goflux to decode. pipe.json.py is
// gzip-compressed JSON: it is parsed, and written back as pipe.json.node.
// Prints one JSON object: {"decoded": {"FORMAT": {"NAME": true | "error"}}, "pipe": {...}}.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import zlib from "node:zlib";
import SnappyJS from "snappyjs";
import { decompress as fzstdDecompress } from "fzstd";
import { init as zstdInit, compress as zstdCompress, decompress as zstdDecompress } from "@bokuweb/zstd-wasm";

await zstdInit();
const dir = process.argv[2];
const buf = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

const formats = {
  gzip: { decode: (b) => zlib.gunzipSync(b), encode: (b) => zlib.gzipSync(b) },
  deflate: { decode: (b) => zlib.inflateRawSync(b), encode: (b) => zlib.deflateRawSync(b) },
  brotli: {
    decode: (b) => zlib.brotliDecompressSync(b),
    encode: (b) => zlib.brotliCompressSync(b, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 6 } }),
  },
  snappy: { decode: (b) => buf(SnappyJS.uncompress(b)), encode: (b) => buf(SnappyJS.compress(b)) },
  zstd: { decode: (b) => buf(zstdDecompress(b)), encode: (b) => buf(zstdCompress(b, 3)) },
  fzstd: { decode: (b) => buf(fzstdDecompress(b)), encode: null },
  base64: { decode: (b) => Buffer.from(b.toString("latin1"), "base64"), encode: (b) => Buffer.from(buf(b).toString("base64")) },
  base64url: {
    decode: (b) => Buffer.from(b.toString("latin1"), "base64url"),
    encode: (b) => Buffer.from(buf(b).toString("base64url")),
  },
  hex: { decode: (b) => Buffer.from(b.toString("latin1"), "hex"), encode: (b) => Buffer.from(buf(b).toString("hex")) },
};

const names = readdirSync(dir).filter((f) => f.endsWith(".raw")).map((f) => f.slice(0, -4));
const decoded = {};
for (const [format, codec] of Object.entries(formats)) {
  decoded[format] = {};
  for (const name of names) {
    const raw = readFileSync(join(dir, `${name}.raw`));
    const source = format === "fzstd" ? "zstd" : format;
    try {
      const out = codec.decode(readFileSync(join(dir, `${source}.${name}.py`)));
      decoded[format][name] = Buffer.compare(out, raw) === 0 ? true : `differs: ${out.length} bytes`;
    } catch (err) {
      decoded[format][name] = `error: ${err.message}`;
    }
    if (codec.encode) {
      // snappyjs and fzstd need a Uint8Array with its own buffer, not a pooled slice
      writeFileSync(join(dir, `${format}.${name}.node`), codec.encode(new Uint8Array(raw)));
    }
  }
}

const order = JSON.parse(zlib.gunzipSync(readFileSync(join(dir, "pipe.json.py"))).toString("utf8"));
writeFileSync(join(dir, "pipe.json.node"), zlib.gzipSync(Buffer.from(JSON.stringify(order))));
console.log(JSON.stringify({ decoded, pipe: order }));
