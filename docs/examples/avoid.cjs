// A gateway in JavaScript learns from placewatch which backends to avoid (npm `nats`, v2).
//
//   node avoid.cjs nats://127.0.0.1:4222
//
// Watches the KV bucket placewatch_compute: every shard's latest ComputeStatus, then each
// change. Prints "ready" once the current ones are read, then a line a status:
// "avoid|serve URL NODE/SHARD VERDICT". A gateway would take URL off (or put it back on) its
// backends there.
"use strict";

const { connect, JSONCodec } = require("nats");

const AVOIDED = new Set(["cpu_fallback", "misplaced", "gone"]);

function url(e) {
  const host = e.host.includes(":") ? `[${e.host}]` : e.host; // an IPv6 address
  return `${e.scheme}://${host}:${e.port}${e.path_prefix}`;
}

async function main() {
  const nc = await connect({ servers: process.argv[2] });
  const kv = await nc.jetstream().views.kv("placewatch_compute", { bindOnly: true });
  const json = JSONCodec();
  const changes = await kv.watch({ initializedFn: () => console.log("ready") });
  for await (const entry of changes) {
    if (entry.operation !== "PUT") continue;
    const s = json.decode(entry.value);
    if (s.schema > 2 || !s.endpoint) continue; // a newer schema, or no endpoint known
    const what = AVOIDED.has(s.verdict) ? "avoid" : "serve";
    console.log(`${what} ${url(s.endpoint)} ${s.node}/${s.shard} ${s.verdict}`);
  }
}

main().catch((err) => {
  console.error(`avoid.cjs: ${err.message}`);
  process.exit(1);
});
