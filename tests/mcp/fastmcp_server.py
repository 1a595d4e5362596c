"""An MCP server built with the official Python SDK (`mcp`, whose FastMCP is MCPServer since
2.0), over Streamable HTTP on 127.0.0.1, for tests/suite/mcp.rs.

Run with the venv tests/mcp/setup.sh makes: `python fastmcp_server.py`. It binds a free port,
prints `PORT <n>` once it listens, and serves until killed. Every request must carry
`Authorization: Bearer $PEN_TEST_MCP_TOKEN` (else 401), so the test checks that pen sends the
token it read from the environment.

Tools: `add_tool` (adds the tool `late_tool` and sends notifications/tools/list_changed), `fail`
(raises: an `isError` result), `stats` (a structured result), `late_tool` once added.
"""

import asyncio
import os
import socket
import sys
from typing import TypedDict

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TOKEN = os.environ["PEN_TEST_MCP_TOKEN"]

server = MCPServer(name="pen-test-python")


class Stats(TypedDict):
    count: int
    mean: float


@server.tool()
def stats(values: list[float]) -> Stats:
    """The count and mean of some numbers."""
    return {"count": len(values), "mean": sum(values) / len(values) if values else 0.0}


@server.tool()
def fail(why: str) -> str:
    """Always fails, saying why."""
    raise ToolError(f"failed on purpose: {why}")


def late_tool() -> str:
    """A tool that exists only after add_tool ran."""
    return "late tool ran"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Adds the tool late_tool and tells the client its tool list changed."""
    server.add_tool(late_tool)
    # 2026-07-28 on, change notifications travel on the client's subscriptions/listen stream;
    # before it, on the session (the server speaks whichever the client negotiated).
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()
    return "added late_tool"


class BearerOnly:
    """Refuses every request without the expected bearer token."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"bearer token required"})
                return
        await self.app(scope, receive, send)


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = BearerOnly(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
