// A NATS micro service written with nats.js v2 (nc.services.add): "node-echo" 1.0.0
// with one endpoint, "echo" on node.echo, that answers with the request's data, or
// fails (an error reply, counted in its stats) when the data is "fail". Prints
// {"ready": true, "id": ...} once the server has its subscriptions, then serves until
// its stdin closes.
// Usage: node micro_service.mjs URL
import { connect } from "nats";

const [url] = process.argv.slice(2);
const nc = await connect({ servers: url });
const service = await nc.services.add({
  name: "node-echo",
  version: "1.0.0",
  description: "echoes requests",
  metadata: { language: "javascript" },
});
service.addEndpoint("echo", {
  subject: "node.echo",
  metadata: { kind: "echo" },
  handler: (err, msg) => {
    if (err) {
      throw err;
    }
    if (new TextDecoder().decode(msg.data) === "fail") {
      throw new Error("asked to fail");
    }
    msg.respond(msg.data);
  },
});
await nc.flush();
console.log(JSON.stringify({ ready: true, id: service.info().id }));

process.stdin.resume();
process.stdin.on("end", async () => {
  await service.stop();
  await nc.close();
});
