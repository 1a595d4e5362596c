#!/usr/bin/env bash
# Issue 26, item 7: a revert of 600 files killed at 10 seeded random points (the
# crash_after_reverted_files test hook aborts pen as abruptly as `kill -9` after K files), and
# what the next use of the session reported each time: one line a kill point. Even points are
# followed by `pen revert` (its `interrupted` report, then the finished revert), odd points by a
# turn (the note the model is sent).
#
# Usage: scripts/revert-kill.sh [FILES] [KILL_POINTS] [SEED]    # defaults: 600, 10 and 26
set -euo pipefail

cd "$(dirname "$0")/.."
export PEN_REVERT_FILES="${1:-600}"
export PEN_REVERT_KILL_POINTS="${2:-10}"
export PEN_REVERT_SEED="${3:-26}"
cargo test --locked --test all suite::checkpoints::a_revert_killed_midway_is_reported_on_the_next_use \
    -- --exact --nocapture 2>&1 | grep -E '^kill point|panicked|failures|test result'
