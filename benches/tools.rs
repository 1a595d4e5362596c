//! Throughput of the native tools on a real corpus: `cargo bench --bench tools`.
//!
//! The corpus is `PEN_BENCH_CORPUS`, or the cargo registry sources (`~/.cargo/registry/src`),
//! which every machine that builds pen has. Each tool has its own `bench_*` function called from
//! `main`; each prints what it measured and, where one exists, the figure of a reference tool.

use pen::limits::{Limits, SearchLimits};
use pen::tools::{self, ToolContext};
use pen::workspace::Workspace;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Timed runs per measurement, after one untimed warm-up that fills the page cache.
const RUNS: usize = 3;

fn main() {
    let Some(corpus) = corpus() else {
        println!("no corpus: set PEN_BENCH_CORPUS or fetch some crates into ~/.cargo/registry/src");
        return;
    };
    println!("corpus: {}", corpus.display());
    bench_search(&corpus);
}

fn corpus() -> Option<PathBuf> {
    let path = match std::env::var_os("PEN_BENCH_CORPUS") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cargo/registry/src"),
    };
    path.is_dir().then_some(path)
}

/// The best wall time of [`RUNS`] runs of `f` after a warm-up, with the last run's value.
fn best_of<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut value = f();
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        let next = f();
        best = best.min(start.elapsed());
        // Dropping the previous value is not part of the measured call.
        value = next;
    }
    (best, value)
}

fn megabytes_per_second(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / 1e6 / time.as_secs_f64()
}

/// pen_search against `rg -F -c` on the same corpus: a rare query (the cost of walking, reading
/// and scanning) and a common one (plus the cost of building many matches).
fn bench_search(corpus: &Path) {
    let workspace = match Workspace::new(&[corpus.to_path_buf()]) {
        Ok(workspace) => workspace,
        Err(e) => {
            println!("pen_search: cannot open the corpus: {e}");
            return;
        }
    };
    let rg_available = Command::new("rg").arg("--version").output().is_ok();
    if !rg_available {
        println!("pen_search: rg is not installed; printing pen's figures without a comparison");
    }
    for (label, query, max_matches) in [
        ("rare", "fn fallible_iterator_probe", 100),
        ("common", "unsafe", 1_000_000),
    ] {
        // Only the match limit may stop the search, so that it reads the whole corpus.
        let limits = Limits {
            max_tool_result_bytes: 1 << 30,
            search: SearchLimits {
                max_entries: usize::MAX,
                max_files: usize::MAX,
                max_bytes: u64::MAX / 2,
                max_depth: usize::MAX,
                max_matches,
                ..SearchLimits::default()
            },
            ..Limits::default()
        };
        let ctx = ToolContext {
            workspace: &workspace,
            limits: &limits,
            ledger: None,
        };
        let (pen_time, result) =
            best_of(|| tools::call("pen_search", &json!({ "query": query }), &ctx));
        let result = match result {
            Ok(result) => result,
            Err(e) => {
                println!("pen_search {label}: failed: {e}");
                continue;
            }
        };
        let pen_bytes = result["bytes_read"].as_u64().unwrap_or_default();
        let pen_matches = result["matches"].as_array().map_or(0, Vec::len);
        let pen_rate = megabytes_per_second(pen_bytes, pen_time);
        println!(
            "pen_search {label} {query:?}: {pen_matches} matches, {} files, {pen_bytes} bytes in \
             {:.1} ms = {pen_rate:.0} MB/s (truncated: {}, limit_hit: {})",
            result["files_searched"],
            pen_time.as_secs_f64() * 1e3,
            result["truncated"],
            result.get("limit_hit").unwrap_or(&Value::Null),
        );
        if !rg_available {
            continue;
        }
        let (rg_time, rg_output) = best_of(|| {
            Command::new("rg")
                .args(["-F", "--no-messages", "-c", query])
                .arg(corpus)
                .output()
        });
        let rg_lines: u64 = rg_output
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.rsplit_once(':')?.1.parse::<u64>().ok())
            .sum();
        let rg_bytes = rg_bytes_searched(query, corpus).unwrap_or(pen_bytes);
        let rg_rate = megabytes_per_second(rg_bytes, rg_time);
        println!(
            "rg -F -c   {label} {query:?}: {rg_lines} matching lines, {rg_bytes} bytes in {:.1} ms \
             = {rg_rate:.0} MB/s; pen/rg throughput = {:.2}",
            rg_time.as_secs_f64() * 1e3,
            pen_rate / rg_rate
        );
    }
}

/// The bytes ripgrep searched for `query`, from an untimed run with `--stats`.
fn rg_bytes_searched(query: &str, corpus: &Path) -> Option<u64> {
    let output = Command::new("rg")
        .args(["-F", "--no-messages", "-c", "--stats", query])
        .arg(corpus)
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_suffix(" bytes searched")?.trim().parse().ok())
}
