#!/usr/bin/env bash
# Installs the ACP clients the `pen acp` end-to-end tests drive (tests/suite/acp.rs), pinned,
# into ~/.cache/pen, once: the official Python SDK into a venv and the official TypeScript SDK
# with npm. Prints the `export` lines the tests read; progress goes to stderr.
#
#   eval "$(tests/acp/setup.sh)" && cargo test --test all suite::acp
set -euo pipefail

PY_VERSION=0.12.1
TS_VERSION=2.4.0
cache="${PEN_CACHE_DIR:-$HOME/.cache/pen}"
venv="$cache/acp-py-$PY_VERSION"
npm_prefix="$cache/acp-ts-$TS_VERSION"

if ! "$venv/bin/python" -c "import acp" 2>/dev/null; then
    echo "tests/acp/setup.sh: installing agent-client-protocol==$PY_VERSION into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "agent-client-protocol==$PY_VERSION" >&2
fi
if [ ! -f "$npm_prefix/node_modules/@agentclientprotocol/sdk/package.json" ]; then
    echo "tests/acp/setup.sh: installing @agentclientprotocol/sdk@$TS_VERSION into $npm_prefix" >&2
    mkdir -p "$npm_prefix"
    npm install --silent --no-audit --no-fund --prefix "$npm_prefix" "@agentclientprotocol/sdk@$TS_VERSION" >&2
fi
echo "export PEN_ACP_PYTHON=$venv/bin/python"
echo "export PEN_ACP_TS_MODULES=$npm_prefix/node_modules"
