// Validates AsyncAPI documents with the official parser (@asyncapi/parser). For each FILE
// it prints one JSON line: {"file", "valid", "version", "diagnostics": [{severity, code,
// message, path}]}; severity 0 is an error, 1 a warning, 2 information, 3 a hint.
// Exits 1 when any document has an error, 0 otherwise.
// Usage: node validate_asyncapi.mjs FILE...
//        node validate_asyncapi.mjs --serve    one FILE a request, asked on stdin (serve.mjs)
import { readFileSync } from "node:fs";
import { Parser } from "@asyncapi/parser";
import { serve } from "./serve.mjs";

const parser = new Parser();

async function verdict(file) {
  const { document, diagnostics } = await parser.parse(readFileSync(file, "utf8"));
  const errors = diagnostics.filter((d) => d.severity === 0);
  const valid = Boolean(document) && errors.length === 0;
  return {
    file,
    valid,
    version: document ? document.version() : null,
    diagnostics: diagnostics.map((d) => ({
      severity: d.severity,
      code: d.code,
      message: d.message,
      path: d.path,
    })),
  };
}

if (process.argv[2] === "--serve") {
  await serve(([file]) => verdict(file));
} else {
  let failed = false;
  for (const file of process.argv.slice(2)) {
    const found = await verdict(file);
    failed ||= !found.valid;
    console.log(JSON.stringify(found));
  }
  process.exit(failed ? 1 : 0);
}
