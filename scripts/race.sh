#!/bin/sh
# The workspace-confinement race at a larger count: every tool is called 10,000 times (or
# $1 times; pen_command a fifth of it) while a thread swaps a folder of the workspace for a
# symlink to an outside folder, and the figures (runs, escapes, stray temp files) are printed
# for the closing note. It runs the test `cargo test` runs, tests/suite/confinement.rs, one
# race at a time, and exits non-zero when any tool escaped.
#
# Usage: scripts/race.sh [CALLS_PER_TOOL]
set -eu
cd "$(dirname "$0")/.."
runs="${1:-10000}"
case "$runs" in
    '' | *[!0-9]*) echo "usage: scripts/race.sh [CALLS_PER_TOOL]" >&2; exit 2 ;;
esac
log="$(mktemp "${TMPDIR:-/tmp}/pen-race.XXXXXX")"
trap 'rm -f "$log"' EXIT
echo "confinement race: $runs calls per tool ($(( (runs + 4) / 5 )) for pen_command)"
status=0
PEN_RACE_RUNS="$runs" cargo test --locked --test all suite::confinement -- --nocapture \
    >"$log" 2>&1 || status=$?
grep -E '^pen_[a-z]+: runs|^test result|panicked at|escaped the workspace|left temp files' "$log" || cat "$log"
exit "$status"
