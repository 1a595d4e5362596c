#!/usr/bin/env bash
# Installs the real MCP servers tests/suite/mcp.rs runs, pinned, into ~/.cache/pen (idempotent:
# a finished install is reused), and prints the variables the tests read:
#
#   eval "$(tests/mcp/setup.sh)" && cargo test --test all suite::mcp
#
# - @modelcontextprotocol/server-everything from npm (stdio), PEN_MCP_EVERYTHING: its entry
#   script, run with `node FILE stdio`;
# - the official Python SDK `mcp` from PyPI in a venv (its MCPServer, once FastMCP, over Streamable HTTP),
#   PEN_MCP_PYTHON: that venv's python, which runs tests/mcp/fastmcp_server.py.
# Progress goes to stderr, so stdout is only the export lines.
set -euo pipefail

EVERYTHING_VERSION=2026.8.31
PYTHON_MCP_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pen"

everything="$cache/mcp-everything-$EVERYTHING_VERSION"
entry="$everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if [ ! -f "$everything/.done" ]; then
    echo "tests/mcp/setup.sh: npm install @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $everything" >&2
    mkdir -p "$everything"
    npm install --prefix "$everything" --no-audit --no-fund --silent \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" >&2
    test -f "$entry"
    touch "$everything/.done"
fi

venv="$cache/mcp-python-$PYTHON_MCP_VERSION"
if [ ! -f "$venv/.done" ]; then
    echo "tests/mcp/setup.sh: python3 -m venv $venv && pip install mcp==$PYTHON_MCP_VERSION" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$PYTHON_MCP_VERSION" >&2
    "$venv/bin/python" -c "import mcp.server.mcpserver" >&2
    touch "$venv/.done"
fi

ts_sdk="$cache/mcp-ts-sdk-$TS_SDK_VERSION"
ts_package="$ts_sdk/node_modules/@modelcontextprotocol/sdk"
if [ ! -f "$ts_sdk/.done" ]; then
    echo "tests/mcp/setup.sh: npm install @modelcontextprotocol/sdk@$TS_SDK_VERSION into $ts_sdk" >&2
    mkdir -p "$ts_sdk"
    npm install --prefix "$ts_sdk" --no-audit --no-fund --silent \
        "@modelcontextprotocol/sdk@$TS_SDK_VERSION" >&2
    test -f "$ts_package/dist/esm/client/stdio.js"
    touch "$ts_sdk/.done"
fi

echo "export PEN_MCP_EVERYTHING=$entry"
echo "export PEN_MCP_TS_SDK=$ts_package"
echo "export PEN_MCP_PYTHON=$venv/bin/python"
