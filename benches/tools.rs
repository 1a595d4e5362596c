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
    // `cargo bench --bench tools -- read_pages` runs only that measurement.
    if std::env::args().any(|arg| arg == "read_pages") {
        bench_read_pages();
        return;
    }
    // `cargo bench --bench tools -- list` runs only the pen_list measurement.
    if std::env::args().any(|arg| arg == "list") {
        bench_list();
        return;
    }
    // `cargo bench --bench tools -- search` runs only the pen_search measurements.
    let only_search = std::env::args().any(|arg| arg == "search");
    match corpus() {
        Some(corpus) => {
            println!("corpus: {}", corpus.display());
            bench_search(&corpus);
        }
        None => println!(
            "pen_search: no corpus: set PEN_BENCH_CORPUS or fetch some crates into ~/.cargo/registry/src"
        ),
    }
    if only_search {
        return;
    }
    bench_read();
    bench_read_pages();
    bench_list();
}

/// Calls a tool in a workspace at the default limits; panics on a tool error, which would make
/// the figure meaningless.
fn call(root: &Path, name: &str, args: Value) -> Value {
    let workspace = Workspace::new(&[root.to_path_buf()]).expect("workspace");
    let limits = Limits::default();
    let ctx = ToolContext {
        workspace: &workspace,
        limits: &limits,
        ledger: None,
        editor: None,
        recorder: None,
    };
    tools::call(name, &args, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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

/// pen_search against ripgrep on the same corpus: a rare query (the cost of walking, reading
/// and scanning) and a common one (plus the cost of building many matches), each against
/// `rg -F -c` (counting only) and `rg -F -n --column` (every match with its position, the job
/// pen_search does).
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
            editor: None,
            recorder: None,
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
        // The same job as pen's: every matching line with its line and column, printed.
        let (rg_print_time, _) = best_of(|| {
            Command::new("rg")
                .args([
                    "-F",
                    "--no-messages",
                    "-n",
                    "--column",
                    "--no-heading",
                    query,
                ])
                .arg(corpus)
                .output()
        });
        let rg_print_rate = megabytes_per_second(rg_bytes, rg_print_time);
        println!(
            "rg -F -n --column {label} {query:?}: every match printed in {:.1} ms = {rg_print_rate:.0} MB/s; \
             pen/rg throughput = {:.2}",
            rg_print_time.as_secs_f64() * 1e3,
            pen_rate / rg_print_rate
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

/// pen_read on a 1 GiB log: the last page through the cursor against the first page. The file
/// is sparse (a text head, a hole, a text tail) so it is cheap to make; the cursor never
/// touches the hole.
fn bench_read() {
    const SIZE: u64 = 1 << 30;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("huge.log");
    let line = |i: u64| {
        format!(
            "2026-11-30T12:00:00Z INFO worker-{} handled request {i} in 3 ms\n",
            i % 8
        )
    };
    let mut head = String::new();
    let mut i = 0;
    while head.len() < 1 << 20 {
        head.push_str(&line(i));
        i += 1;
    }
    let head_lines = i;
    let mut tail = String::new();
    while tail.len() < 1 << 20 {
        tail.push_str(&line(i));
        i += 1;
    }
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::File::create(&path).expect("create");
        file.write_all(head.as_bytes()).expect("write head");
        file.seek(SeekFrom::Start(SIZE - tail.len() as u64 - 1))
            .expect("seek");
        // The byte before the tail ends the hole's "line".
        file.write_all(b"\n").expect("write");
        file.write_all(tail.as_bytes()).expect("write tail");
    }
    let last_offset = SIZE - 40 * line(i).len() as u64;
    let last_offset =
        last_offset - (last_offset - (SIZE - tail.len() as u64)) % line(i).len() as u64;
    // The head's lines, the hole's one line, and the tail's lines before the cursor.
    let tail_start = SIZE - tail.len() as u64;
    let last_line = head_lines + 1 + (last_offset - tail_start) / line(i).len() as u64 + 1;
    let ctx_root = dir.path().to_path_buf();
    let last_page = || {
        call(
            &ctx_root,
            "pen_read",
            json!({"path": "huge.log", "start_line": last_line, "offset": last_offset}),
        )
    };
    let (first, _) = best_of(|| call(&ctx_root, "pen_read", json!({"path": "huge.log"})));
    // A version written less than FILE_VERSION_SETTLE ago is not cached: its cursor's line is
    // counted from the start each time.
    let (last_fresh, _) = best_of(last_page);
    std::thread::sleep(SETTLE_WAIT);
    let (last, _) = best_of(last_page);
    let (tail_time, _) = best_of(|| call(&ctx_root, "pen_tail", json!({"path": "huge.log"})));
    println!("pen_read on a 1 GiB log");
    println!("  first page                 {:>9.3} ms", ms(first));
    println!(
        "  last page, fresh file      {:>9.3} ms  (its line counted from the start)",
        ms(last_fresh)
    );
    println!("  last page via next_offset  {:>9.3} ms", ms(last));
    println!("  pen_tail                   {:>9.3} ms", ms(tail_time));
    println!(
        "  last/first ratio           {:>9.2}   (target <= 2)",
        last.as_secs_f64() / first.as_secs_f64()
    );
}

/// Longer than `pen::limits::FILE_VERSION_SETTLE` (3 s): a file written this long ago has a
/// settled version, whose hash and line marks pen keeps.
const SETTLE_WAIT: Duration = Duration::from_millis(3_500);

/// pen_read pages of a 16 MiB file (the largest whose content is hashed): the first page, and
/// a page in the middle through its cursor, once the file's version has settled. Before the
/// per-version cache every page hashed the whole file.
fn bench_read_pages() {
    const SIZE: usize = 16 * 1024 * 1024;
    const LINE: usize = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = SIZE / LINE;
    let text: String = (0..lines)
        .map(|i| format!("{i:010} {}\n", "x".repeat(LINE - 12)))
        .collect();
    std::fs::write(dir.path().join("big.txt"), &text).expect("write");
    std::thread::sleep(SETTLE_WAIT);
    let root = dir.path().to_path_buf();
    let middle = lines as u64 / 2;
    let (first, _) = best_of(|| call(&root, "pen_read", json!({"path": "big.txt"})));
    let (page, value) = best_of(|| {
        call(
            &root,
            "pen_read",
            json!({"path": "big.txt", "start_line": middle + 1, "offset": middle * LINE as u64}),
        )
    });
    assert_eq!(value["start_line"], middle + 1);
    println!("pen_read on a 16 MiB file (hashed for pen_edit)");
    println!("  first page                 {:>9.3} ms", ms(first));
    println!("  middle page via cursor     {:>9.3} ms", ms(page));
}

/// pen_list through a folder of 100,000 entries: every page, following `next_after` to the end,
/// against `ls -f` of the folder (all names, unsorted); and page 100 against page 1.
///
/// The folder has been unchanged for longer than `pen::limits::FILE_VERSION_SETTLE`, as a
/// folder a model pages through mostly has: pen keeps the sorted listing of such a folder for
/// its next pages. Each run of all pages begins on a new version of the folder (an entry
/// renamed away and back, then settled), so its first page lists the folder again.
fn bench_list() {
    const ENTRIES: usize = 100_000;
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..ENTRIES {
        std::fs::File::create(dir.path().join(format!("entry-{i:06}.txt"))).expect("create");
    }
    let root = dir.path().to_path_buf();
    let (ls, _) = best_of(|| {
        Command::new("ls")
            .arg("-f")
            .arg(&root)
            .output()
            .expect("ls")
    });
    let page = |after: Option<&str>| {
        let args = after.map_or_else(|| json!({}), |after| json!({ "after": after }));
        call(&root, "pen_list", args)
    };
    let mut all = Duration::MAX;
    let mut first = Duration::MAX;
    let mut pages = 0;
    let mut cursors = Vec::new();
    for _ in 0..RUNS {
        let moved = root.join("moved.txt");
        std::fs::rename(root.join("entry-000000.txt"), &moved).expect("rename");
        std::fs::rename(&moved, root.join("entry-000000.txt")).expect("rename");
        std::thread::sleep(SETTLE_WAIT);
        let started = Instant::now();
        let mut value = page(None);
        let first_page = started.elapsed();
        let mut after = Vec::new();
        let mut listed = value["entries"].as_array().map_or(0, Vec::len);
        while let Some(next) = value["next_after"].as_str().map(str::to_string) {
            value = page(Some(&next));
            listed += value["entries"].as_array().map_or(0, Vec::len);
            after.push(next);
        }
        let elapsed = started.elapsed();
        assert_eq!(listed, ENTRIES, "every entry once");
        first = first.min(first_page);
        all = all.min(elapsed);
        pages = after.len() + 1;
        cursors = after;
    }
    // Page 100 through its cursor, and page 1, of the same kept listing.
    let (page_1, _) = best_of(|| page(None));
    let (page_100, value) = best_of(|| page(Some(&cursors[98])));
    assert_eq!(value["entries"][0]["name"], "entry-019800.txt");
    println!("pen_list through a folder of {ENTRIES} entries");
    println!(
        "  ls -f of the folder            {:>9.3} ms  (reference)",
        ms(ls)
    );
    println!(
        "  all {pages} pages via next_after  {:>9.3} ms  ({:.2}x ls -f; target <= 20)",
        ms(all),
        all.as_secs_f64() / ls.as_secs_f64()
    );
    println!(
        "  first page (lists the folder)  {:>9.3} ms  ({:.2}x ls -f)",
        ms(first),
        first.as_secs_f64() / ls.as_secs_f64()
    );
    println!("  page 1                         {:>9.3} ms", ms(page_1));
    println!(
        "  page 100 via its cursor        {:>9.3} ms  ({:.2}x page 1; target <= 1.5)",
        ms(page_100),
        page_100.as_secs_f64() / page_1.as_secs_f64()
    );
}
