"""A client of `pen mcp serve` built with the official MCP Python SDK (`mcp` on PyPI).

Usage: python serve_client.py MODE COMMAND [ARG...]
MODE is the SDK's connect mode: "auto" (its default: probes `server/discover` before
`initialize`) or "legacy" (the classic `initialize` handshake). It starts COMMAND as a stdio
server, prints {"protocolVersion": ...}, then answers one JSON line on stdin with one JSON line
on stdout: {"op": "list"} lists the tools, {"op": "call", "name": ..., "arguments": {...}}
calls one (the result as the SDK parsed it). tests/suite/mcp_serve.rs drives it.
"""

import asyncio
import json
import os
import sys

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


async def main():
    mode, command, *args = sys.argv[1:]
    # The whole environment: the SDK's default passes only a few variables, not PEN_DATA_DIR.
    server = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with Client(server, mode=mode) as client:
        print(json.dumps({"protocolVersion": client.protocol_version}), flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            step = json.loads(line)
            if step["op"] == "list":
                answer = [dump(tool) for tool in (await client.list_tools()).tools]
            else:
                answer = dump(await client.call_tool(step["name"], step.get("arguments", {})))
            print(json.dumps(answer), flush=True)


asyncio.run(main())
