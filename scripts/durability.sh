#!/usr/bin/env bash
# Repeats the durability property test (issue 11, item 1) at a larger count and prints its
# figures for the closing note: `kill points: N, bricked: B, lost entries: L, calls with != 1
# result: C (seed S)`. Each kill point is a real `pen run` that dies at a seeded random point of
# a multi-call turn, then a restarted `pen run --session` that must end `end_turn`.
#
# Usage: scripts/durability.sh [KILL_POINTS] [SEED]    # defaults: 1000 and 11
# Exits non-zero when any kill point bricked the session, lost an entry or miscounted a call.
set -euo pipefail

cd "$(dirname "$0")/.."
export PEN_DURABILITY_KILL_POINTS="${1:-1000}"
export PEN_DURABILITY_SEED="${2:-11}"
cargo test --locked --test all suite::durability::no_kill_point_bricks_a_session_or_loses_an_entry \
    -- --exact --nocapture 2>&1 | grep -E '^kill points:|panicked|failures|test result'
