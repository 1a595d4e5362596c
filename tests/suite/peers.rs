//! The real peers a test needs (a model server, an ACP client SDK, an MCP server), found by
//! the variables their setup scripts print. A test whose peer is missing fails, saying how to
//! provide it, unless `PEN_SKIP_REAL_PEERS=1` skips it knowingly (refused under `CI`); a skip is
//! printed and appended to `PEN_SKIPPED_LOG`, which `scripts/test` counts, so it is never a
//! silent pass. Shared by `tests/suite` and `tests/real_llama.rs` (included by path).

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

/// What a test needs: the variables that name its peer, and how to get them.
pub struct Needs<'a> {
    /// The test file, for the skip line (`tests/suite/acp.rs`).
    pub file: &'a str,
    /// The peer, for the failure message ("a real llama-server").
    pub peer: &'a str,
    /// The commands that set the variables ("eval \"$(scripts/llama-server.sh)\"").
    pub setup: &'a str,
}

/// The values of `variables` for `test` (all set and not empty), or `None` when this run
/// skips the real-peer tests knowingly. Panics when neither: a test must never pass without
/// its peer.
pub fn peer(needs: &Needs, variables: &[&str], test: &str) -> Option<Vec<OsString>> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let values: Vec<OsString> = variables.iter().filter_map(|name| var(name)).collect();
    if values.len() == variables.len() {
        return Some(values);
    }
    let under_ci = var("CI").is_some_and(|value| value != "0" && value != "false");
    let skip = var("PEN_SKIP_REAL_PEERS").is_some_and(|value| value == "1");
    assert!(
        skip && !under_ci,
        "{test} needs {}, and {} {} unset. Run the whole suite with scripts/test (it installs \
         the peers once and caches them), or {} before cargo test; to skip the real-peer tests \
         knowingly, set PEN_SKIP_REAL_PEERS=1 (refused under CI).",
        needs.peer,
        variables.join(" / "),
        if variables.len() == 1 { "is" } else { "are" },
        needs.setup,
    );
    let line = format!("{} {test}: skipped (PEN_SKIP_REAL_PEERS=1)\n", needs.file);
    eprint!("{line}");
    if let Some(log) = var("PEN_SKIPPED_LOG") {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("record the skip in {}: {e}", Path::new(&log).display()));
    }
    None
}
