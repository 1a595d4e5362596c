// A second, independent ACP client: the official TypeScript SDK (@agentclientprotocol/sdk)
// drives one prompt through `pen acp` end to end. Run by tests/suite/acp.rs, which starts the
// fake model provider; prints one JSON line of what it saw.
//
//   PEN_ACP_PEN=target/debug/pen PEN_ACP_TS_MODULES=... node client.mjs WORKSPACE

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

// Every wait on pen is bounded; a hung pen fails the test instead of hanging it.
const WAIT_MS = 30_000;

const modules = process.env.PEN_ACP_TS_MODULES;
const require = createRequire(path.join(modules, "noop.js"));
const entry = require.resolve("@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(entry).href);

const workspace = process.argv[2];
const pen = spawn(process.env.PEN_ACP_PEN, ["acp"], {
  cwd: workspace,
  stdio: ["pipe", "pipe", "inherit"],
});
const stream = acp.ndJsonStream(Writable.toWeb(pen.stdin), Readable.toWeb(pen.stdout));

let text = "";
const app = acp
  .client({ name: "pen-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    const update = params.update;
    if (update.sessionUpdate === "agent_message_chunk" && update.content.type === "text") {
      text += update.content.text;
    }
  })
  .onRequest(acp.methods.client.session.requestPermission, () => ({
    outcome: { outcome: "cancelled" },
  }));

const timeout = setTimeout(() => {
  console.error("timed out waiting for pen acp");
  pen.kill("SIGKILL");
  process.exit(1);
}, WAIT_MS);

const seen = await app.connectWith(stream, async (ctx) => {
  const init = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  });
  if (init.protocolVersion !== 1 || !init.agentCapabilities.loadSession) {
    throw new Error(`unexpected initialize answer ${JSON.stringify(init)}`);
  }
  const session = await ctx.request(acp.methods.agent.session.new, {
    cwd: workspace,
    mcpServers: [],
  });
  const answer = await ctx.request(acp.methods.agent.session.prompt, {
    sessionId: session.sessionId,
    prompt: [{ type: "text", text: "say hello" }],
  });
  return { sessionId: session.sessionId, stopReason: answer.stopReason };
});
clearTimeout(timeout);
pen.stdin.end();
console.log(JSON.stringify({ ...seen, text }));
process.exit(0);
