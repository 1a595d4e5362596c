// A client of `pen mcp serve` built with the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk on npm), the one tests/suite/mcp_serve.rs drives like
// serve_client.py: `node serve_client.mjs COMMAND [ARG...]` with PEN_MCP_TS_SDK naming the SDK's
// package folder. It starts COMMAND as a stdio server, prints {"protocolVersion": ...}, then
// answers one JSON line on stdin ({"op": "list"} or {"op": "call", "name", "arguments"}) with
// one JSON line on stdout.
import path from "node:path";
import readline from "node:readline";

const sdk = process.env.PEN_MCP_TS_SDK;
const { Client } = await import(path.join(sdk, "dist/esm/client/index.js"));
const { StdioClientTransport } = await import(path.join(sdk, "dist/esm/client/stdio.js"));

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "pen-test", version: "1.0.0" });
// The SDK hands the negotiated version to a transport that takes it; stdio's does not, so it is
// caught here.
let negotiated = null;
transport.setProtocolVersion = (version) => {
  negotiated = version;
};
await client.connect(transport);
console.log(JSON.stringify({ protocolVersion: negotiated }));

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const step = JSON.parse(line);
  const answer =
    step.op === "list"
      ? (await client.listTools()).tools
      : await client.callTool({ name: step.name, arguments: step.arguments ?? {} });
  console.log(JSON.stringify(answer));
}
await client.close();
