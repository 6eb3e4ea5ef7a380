// Message schedules (ADR-51) from nats.js, for goflux's interop tests
// (tests/transports/jetstream/test_schedules_node.py). nats.js 2.x (the legacy
// client) has no typed schedules: it sends the server's raw headers.
//
//   node schedules.mjs publish URL SUBJECT TARGET SCHEDULE BODY
//       stores BODY on SUBJECT with "Nats-Schedule: SCHEDULE" and
//       "Nats-Schedule-Target: TARGET"; prints the PubAck {stream, seq}
//   node schedules.mjs read URL STREAM SUBJECT
//       reads the first message on SUBJECT of STREAM (waits up to 10 s); prints
//       {subject, data, headers} (headers: name -> first value)
//
// The last line printed is JSON.
import { connect, headers } from "nats";

const [mode, url, ...args] = process.argv.slice(2);
const nc = await connect({ servers: url });
try {
  const js = nc.jetstream();
  if (mode === "publish") {
    const [subject, target, schedule, body] = args;
    const h = headers();
    h.set("Nats-Schedule", schedule);
    h.set("Nats-Schedule-Target", target);
    const ack = await js.publish(subject, new TextEncoder().encode(body), { headers: h });
    console.log(JSON.stringify({ stream: ack.stream, seq: ack.seq }));
  } else if (mode === "read") {
    const [stream, subject] = args;
    const consumer = await js.consumers.get(stream, { filterSubjects: subject });
    const msg = await consumer.next({ expires: 10000 });
    if (msg === null) throw new Error(`no message on ${subject} within 10 s`);
    const found = {};
    for (const [name, values] of msg.headers ?? []) found[name] = values[0];
    console.log(
      JSON.stringify({ subject: msg.subject, data: msg.string(), headers: found }),
    );
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
} finally {
  await nc.close();
}
