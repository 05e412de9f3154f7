// The TypeScript SDK's client (what desktop hosts and IDEs are built on) against the gated server
// (tests/gated_server.py), driven through every way a call ends, printing what it saw as one JSON object.
// Usage: node ts_client.mjs stdio VAULT COMMAND ARG... | node ts_client.mjs http VAULT URL
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [transportName, vault, ...target] = process.argv.slice(2);
const transport = transportName === "stdio"
  ? new StdioClientTransport({ command: target[0], args: target.slice(1), env: process.env, stderr: "ignore" })
  : new StreamableHTTPClientTransport(new URL(target[0]));
const client = new Client({ name: "ts-client", version: "0" });
await client.connect(transport);
const seen = {};

// How one call ended, as this client saw it.
async function call(name, args, options = {}) {
  try {
    const result = await client.callTool({ name, arguments: args }, undefined, options);
    return result.isError ? "isError" : "result";
  } catch (error) {
    if (options.signal?.aborted) return "aborted";
    return error.code === -32001 ? "timeout" : `error ${error.code}`;
  }
}

seen.echo = await call("echo", { text: "hi" });
seen.broken = await call("broken", { text: "hi" });

// The caller's AbortSignal, mid-call: the client sends notifications/cancelled with the abort's reason.
const stop = new AbortController();
const aborted = call("hang", {}, { signal: stop.signal });
await client.ping(); // the call was read before the ping is answered
stop.abort("the user pressed stop");
seen.abort = await aborted;

// The client's own timeout.
seen.timeout = await call("hang", {}, { timeout: 300 });

// A ghost: a write that cannot be interrupted has started, its caller aborts, then the write is let finish.
const giveUp = new AbortController();
const write = call("shielded_write", { name: "g.md" }, { signal: giveUp.signal });
await call("wait_started", {});
giveUp.abort("timed out waiting for the write");
seen.ghost = await write;
// Over HTTP each message is a request of its own, in no set order: ask the server whether the plugin read the
// cancel before the write is released.
while ((await client.callTool({ name: "cancel_read", arguments: { tool: "shielded_write" } })).content[0].text !== "read");
await call("release", {});
while (!existsSync(join(vault, "g.md"))) await new Promise((resolve) => setTimeout(resolve, 20));
// The caller saw a cancel, and retries the write that already happened.
seen.retry = await call("shielded_write", { name: "g.md" });

await client.close();
console.log(JSON.stringify(seen));
