// Distributed counters (ADR-49) from nats.js v2 (the legacy client, "nats" 2.29.3),
// which has no typed counter: an increment is a plain js.publish with an empty body and
// a Nats-Incr header, its PubAck's "val" (a decimal string) is read untyped, and a
// counter is read with a direct get and with the API's message get of the subject's
// last message, whose body is {"val":"<decimal>"}. Values are BigInts, never Numbers.
// Usage: node counters.mjs URL STREAM ADD_SUBJECT DELTA READ_SUBJECT
// Adds DELTA to ADD_SUBJECT, then reads ADD_SUBJECT and READ_SUBJECT both ways.
// Prints one JSON object; every value is a decimal string:
// {"ack": "...", "added": {"direct": "...", "msg_get": "..."}, "read": {...}}.
import { connect, Empty, headers } from "nats";

const [url, stream, addSubject, delta, readSubject] = process.argv.slice(2);
const nc = await connect({ servers: url });
const js = nc.jetstream();
const jsm = await nc.jetstreamManager();

const h = headers();
h.set("Nats-Incr", BigInt(delta) < 0n ? `${BigInt(delta)}` : `+${BigInt(delta)}`);
const ack = await js.publish(addSubject, Empty, { headers: h });

const value = (data) => BigInt(JSON.parse(new TextDecoder().decode(data)).val);
async function read(subject) {
  const direct = await jsm.direct.getMessage(stream, { last_by_subj: subject });
  const stored = await jsm.streams.getMessage(stream, { last_by_subj: subject });
  return { direct: value(direct.data).toString(), msg_get: value(stored.data).toString() };
}

const result = {
  ack: BigInt(ack.val).toString(),
  added: await read(addSubject),
  read: await read(readSubject),
};
await nc.close();
console.log(JSON.stringify(result));
