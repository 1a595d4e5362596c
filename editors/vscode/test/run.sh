#!/usr/bin/env bash
# Tests the VS Code extension: type check, unit tests, then end to end in a real VS Code
# (code-server in headless Chromium, driven by playwright-core) against the real `pen serve` and
# the fake provider. Needs only the Rust-built daemon (target/debug/pen, or PEN_BIN), Python 3,
# Node 20 and npm; installs the rest (Debian packages as root, code-server into a cache dir
# outside the repository, reused when present). A failed install fails the script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ext="$(cd "$here/.." && pwd)"
repo="$(cd "$ext/../.." && pwd)"
export PEN_BIN="${PEN_BIN:-$repo/target/debug/pen}"
[ -x "$PEN_BIN" ] || { echo "run.sh: $PEN_BIN not found; run cargo build first" >&2; exit 2; }

CODE_SERVER_VERSION=4.100.3
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pen"
cs_dir="$cache/code-server-$CODE_SERVER_VERSION"
out="$here/out"
started=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - started) / 1000000 )) ms"; }
say() { echo "== $* (at $(elapsed))"; }

e2e_pid=""
cleanup() {
  if [ -n "$e2e_pid" ]; then kill -- "-$e2e_pid" 2>/dev/null || true; fi
  if [ -f "$out/code-server.pgid" ]; then kill -- "-$(cat "$out/code-server.pgid")" 2>/dev/null || true; fi
  rm -f "$out/code-server.pgid"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "Debian packages (code-server's native modules, ripgrep, chromium)"
packages=(build-essential python3 pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev ripgrep chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "run.sh: missing packages, install them as root: apt-get install -y ${missing[*]}" >&2
    exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

say "npm ci (editors/vscode)"
(cd "$ext" && npm ci --no-audit --no-fund --loglevel=error)

if [ ! -x "$cs_dir/node_modules/.bin/code-server" ]; then
  say "code-server $CODE_SERVER_VERSION into $cs_dir"
  # @vscode/ripgrep downloads rg from GitHub at install time: seed its cache with Debian's rg.
  seed="$(mktemp -d)"
  mkdir -p /tmp/vscode-ripgrep-cache-1.15.11
  cp /usr/bin/rg "$seed/"
  tar czf /tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz -C "$seed" rg
  rm -rf "$seed" "$cs_dir.partial"
  mkdir -p "$cs_dir.partial"
  echo '{"private": true}' >"$cs_dir.partial/package.json"
  # code-server's postinstall installs VS Code's own modules: it needs install scripts allowed
  # (npm 11 blocks them by default), unsafe-perm as root, and yes for the node-gyp it npx-runs.
  (cd "$cs_dir.partial" && npm_config_unsafe_perm=true npm_config_dangerously_allow_all_scripts=true \
    npm_config_yes=true npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION")
  mv "$cs_dir.partial" "$cs_dir"
fi
code_server="$cs_dir/node_modules/.bin/code-server"
probe="$(mktemp)"
printf 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n' >"$probe"
version="$("$code_server" --config "$probe" --version)"
rm -f "$probe"
case "$version" in
  "$CODE_SERVER_VERSION "*) echo "code-server $version" ;;
  *) echo "run.sh: $code_server is not code-server $CODE_SERVER_VERSION: $version" >&2; exit 1 ;;
esac

say "tsc --noEmit (strict)"
(cd "$ext" && npx tsc --noEmit)

say "npm run package (esbuild + vsce -> pen.vsix)"
(cd "$ext" && npm run --silent package >/dev/null)

say "unit tests (node:test)"
(cd "$ext" && npm run --silent test:unit)

say "end to end in code-server + headless Chromium against $PEN_BIN"
mkdir -p "$out"
# Its own process group, so the trap stops it with the browser and everything it started.
CODE_SERVER="$code_server" VSIX="$ext/pen.vsix" FAKE_OPENAI="$repo/editors/neovim/test/fake_openai.py" \
  OUT_DIR="$out" setsid timeout 600 node "$ext/dist-test/e2e/e2e.js" &
e2e_pid=$!
wait "$e2e_pid"
e2e_pid=""
say "done"
