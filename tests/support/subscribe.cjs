// A subscriber on the official NATS JavaScript client (npm `nats`, v2), as a gateway or an
// alerting service written in JavaScript would read placewatch.
//
//   node subscribe.cjs URL SUBJECT...
//
// Prints {"ready": true} once subscribed, then one JSON line per message: its subject, its
// headers and its payload decoded as JSON. Drains and exits when stdin closes.
"use strict";

const { connect, JSONCodec } = require("nats");

async function main() {
  const [url, ...subjects] = process.argv.slice(2);
  const nc = await connect({ servers: url, name: "placewatch-interop" });
  const json = JSONCodec();
  for (const subject of subjects) {
    const sub = nc.subscribe(subject);
    (async () => {
      for await (const m of sub) {
        const headers = {};
        if (m.headers) {
          for (const key of m.headers.keys()) headers[key] = m.headers.get(key);
        }
        let payload;
        try {
          payload = json.decode(m.data);
        } catch (err) {
          payload = { error: `not JSON: ${err.message}` };
        }
        console.log(JSON.stringify({ subject: m.subject, headers, payload }));
      }
    })();
  }
  await nc.flush();
  console.log(JSON.stringify({ ready: true }));
  process.stdin.resume();
  process.stdin.on("end", () => nc.drain());
  await nc.closed();
}

main().catch((err) => {
  console.error(`subscribe.cjs: ${err.message}`);
  process.exit(1);
});
