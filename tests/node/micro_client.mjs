// A NATS micro service client of another language (nats.js v2, nc.services.client()):
// pings, lists and reads the stats of the services named NAME (and, with ID, of that
// instance too), and prints one JSON object with every answer it got:
//   {"ping": [...], "info": [...], "stats": [...], "instance": {"ping": [...], ...}}
// Usage: node micro_client.mjs URL NAME [ID]
import { connect } from "nats";

const [url, name, id] = process.argv.slice(2);
const nc = await connect({ servers: url });
const client = nc.services.client();

async function collect(verb, ...target) {
  const answers = [];
  for await (const answer of await client[verb](...target)) {
    answers.push(answer);
  }
  return answers;
}

async function all(...target) {
  const [ping, info, stats] = await Promise.all(
    ["ping", "info", "stats"].map((verb) => collect(verb, ...target)),
  );
  return { ping, info, stats };
}

const result = await all(name);
if (id) {
  result.instance = await all(name, id);
}
console.log(JSON.stringify(result));
await nc.close();
