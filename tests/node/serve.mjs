// The --serve mode of the one-shot scripts (tests/nodejs.py, NodeService): one request
// a line on stdin, {"id": N, "args": [...]} with the arguments of a one-shot run, and
// one line of JSON for each on stdout, {"id": N, "result": ...} or {"id": N, "error":
// "..."}, in order; the process exits when stdin closes (even with handles a package
// left open, as the AsyncAPI parser does). One process and one load of the packages,
// for every request of a test run.
import { createInterface } from "node:readline";

export async function serve(handle) {
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (!line.trim()) continue;
    const { id, args } = JSON.parse(line);
    let answer;
    try {
      answer = { id, result: await handle(args) };
    } catch (error) {
      answer = { id, error: String(error?.stack ?? error) };
    }
    console.log(JSON.stringify(answer));
  }
  // Every answer was read before stdin closed: nothing is left to write.
  process.exit(0);
}
