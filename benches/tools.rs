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
    // `cargo bench --bench tools -- paging` runs only the search paging measurement.
    if std::env::args().any(|arg| arg == "paging") {
        bench_search_paging();
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
    bench_search_paging();
    bench_read();
    bench_read_pages();
    bench_list();
}

/// Calls a tool in a workspace at the default limits; panics on a tool error, which would make
/// the figure meaningless.
fn call(root: &Path, name: &str, args: Value) -> Value {
    let workspace = Workspace::new(&[root.to_path_buf()]).expect("workspace");
    let limits = Limits::default();
    let ctx = ToolContext::plain(&workspace, &limits);
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

/// Timed runs of each side of a search comparison, pen's and ripgrep's alternated so that both
/// see the same load on a shared machine.
const SEARCH_RUNS: usize = 7;

/// Panics unless `rg` runs: a search figure without its reference would pass silently.
fn require_rg() {
    if let Err(e) = Command::new("rg").arg("--version").output() {
        panic!(
            "the pen_search benches compare with ripgrep, and `rg` does not run ({e}): install it (Debian: apt-get install ripgrep)"
        );
    }
}

/// ripgrep doing pen_search's job over `root`: a literal, every matching line with its line and
/// column, hidden files searched as pen searches them. Returns the matching lines.
fn rg_lines(query: &str, root: &Path) -> usize {
    let output = Command::new("rg")
        .args([
            "-F",
            "--hidden",
            "--no-messages",
            "-n",
            "--column",
            "--no-heading",
            query,
        ])
        .arg(root)
        .output()
        .expect("rg runs");
    output.stdout.iter().filter(|&&b| b == b'\n').count()
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let value = f();
    (start.elapsed(), value)
}

/// CPU time (user and system) used so far by this process's threads (`RUSAGE_SELF`) or by its
/// waited-for children (`RUSAGE_CHILDREN`): on a shared machine it moves far less with the load
/// than wall time, so it shows which side does more work.
fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct it is given, which is plain data.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The best and the median of some timings.
fn best_median(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    (times[0], times[times.len() / 2])
}

/// pen_search against ripgrep on the same corpus, limits raised so that the whole corpus is
/// searched: a rare query (the cost of walking, reading and scanning) and a common one (plus the
/// cost of building many matches), each against `rg -F --hidden -n --column` (every match with
/// its position, the job pen_search does). The first search of the process is printed apart:
/// it fills whatever pen keeps between searches. Then [`SEARCH_RUNS`] runs of each, alternated;
/// the ratio is ripgrep's time ÷ pen's (target ≥ 0.95, best and median).
fn bench_search(corpus: &Path) {
    require_rg();
    let workspace =
        Workspace::new(&[corpus.to_path_buf()]).expect("the corpus opens as a workspace");
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
        let ctx = ToolContext::plain(&workspace, &limits);
        let search = || {
            tools::call("pen_search", &json!({ "query": query }), &ctx)
                .unwrap_or_else(|e| panic!("pen_search {label}: {e}"))
        };
        let (pen_cold, result) = timed(search);
        let (rg_cold, rg_matches) = timed(|| rg_lines(query, corpus));
        let (mut pen_times, mut rg_times) = (Vec::new(), Vec::new());
        let (mut pen_cpu, mut rg_cpu) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..SEARCH_RUNS {
            let before = cpu_time(libc::RUSAGE_SELF);
            pen_times.push(timed(search).0);
            pen_cpu += cpu_time(libc::RUSAGE_SELF) - before;
            let before = cpu_time(libc::RUSAGE_CHILDREN);
            rg_times.push(timed(|| rg_lines(query, corpus)).0);
            rg_cpu += cpu_time(libc::RUSAGE_CHILDREN) - before;
        }
        let (pen_best, pen_median) = best_median(&mut pen_times);
        let (rg_best, rg_median) = best_median(&mut rg_times);
        let ratio = |rg: Duration, pen: Duration| rg.as_secs_f64() / pen.as_secs_f64();
        println!(
            "pen_search {label} {query:?}: {} matches, {} files, {} bytes (truncated: {}); rg: {rg_matches} matching lines",
            result["matches"].as_array().map_or(0, Vec::len),
            result["files_searched"],
            result["bytes_read"],
            result["truncated"],
        );
        println!(
            "  first search   pen {:>8.1} ms  rg {:>8.1} ms  rg/pen {:.2}",
            ms(pen_cold),
            ms(rg_cold),
            ratio(rg_cold, pen_cold)
        );
        println!(
            "  best of {SEARCH_RUNS}      pen {:>8.1} ms  rg {:>8.1} ms  rg/pen {:.2}  (target >= 0.95)",
            ms(pen_best),
            ms(rg_best),
            ratio(rg_best, pen_best)
        );
        println!(
            "  median of {SEARCH_RUNS}    pen {:>8.1} ms  rg {:>8.1} ms  rg/pen {:.2}  (target >= 0.95)",
            ms(pen_median),
            ms(rg_median),
            ratio(rg_median, pen_median)
        );
        println!(
            "  CPU per search pen {:>8.1} ms  rg {:>8.1} ms  (user + system, mean of {SEARCH_RUNS})",
            ms(pen_cpu / SEARCH_RUNS as u32),
            ms(rg_cpu / SEARCH_RUNS as u32),
        );
    }
    // `ignore`'s sorted walk alone, on one thread, as pen_search walked before a pool listed its
    // folders ahead: the least a search with a sequential walk can take; and pen_search's walk
    // alone (the same entries, in the same order).
    let (walk, entries) = best_of(|| {
        pen::workspace::tree_walk(corpus)
            .filter_entry(|entry| {
                !(entry.file_type().is_some_and(|t| t.is_dir())
                    && pen::workspace::is_skipped_folder(entry.path()))
            })
            .build()
            .count()
    });
    let (pen_walk, pen_entries) = best_of(|| pen::tools::search::walk_entries(corpus));
    println!(
        "  the sorted walk alone ({entries} entries), best of {RUNS}: {:.1} ms; pen_search's walk ({pen_entries} entries, its folders listed ahead by a pool): {:.1} ms",
        ms(walk),
        ms(pen_walk)
    );
}

/// pen_search paged through a tree of 200,000 small files (200 folders of 1,000) at the default
/// limits, so that each page stops at the 1,000-file limit: every page followed through
/// `next_after`, against one ripgrep run over the tree (target: all pages ≤ 2× ripgrep), and
/// page 100's time against page 1's, each the best of [`RUNS`] runs through all pages (target
/// ≤ 1.5×). The tree is left to
/// settle first, as a workspace nobody is writing to is.
fn bench_search_paging() {
    const FOLDERS: usize = 200;
    const FILES: usize = 1_000;
    require_rg();
    let dir = tempfile::tempdir().expect("tempdir");
    for folder in 0..FOLDERS {
        let folder_path = dir.path().join(format!("d{folder:03}"));
        std::fs::create_dir(&folder_path).expect("create folder");
        for file in 0..FILES {
            let needle = if (folder * FILES + file).is_multiple_of(997) {
                "a needle here\n"
            } else {
                ""
            };
            std::fs::write(
                folder_path.join(format!("f{file:04}.txt")),
                format!("file {folder} {file}\nsome text of the file\n{needle}"),
            )
            .expect("write");
        }
    }
    std::thread::sleep(SETTLE_WAIT);
    let root = dir.path();
    let workspace = Workspace::new(&[root.to_path_buf()]).expect("workspace");
    let limits = Limits::default();
    let ctx = ToolContext::plain(&workspace, &limits);
    // Every page in order, each page's time, and the matches of all pages.
    let all_pages = || {
        let mut times = Vec::new();
        let mut matches = 0;
        let mut after: Option<String> = None;
        loop {
            let mut args = json!({"query": "needle"});
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let (time, page) = timed(|| tools::call("pen_search", &args, &ctx));
            let page = page.unwrap_or_else(|e| panic!("pen_search page {}: {e}", times.len() + 1));
            times.push(time);
            matches += page["matches"].as_array().map_or(0, Vec::len);
            match page["next_after"].as_str() {
                Some(next) => after = Some(next.to_string()),
                None => break,
            }
        }
        (times, matches)
    };
    let rg_matches = rg_lines("needle", root);
    let mut rg_times: Vec<Duration> = (0..RUNS)
        .map(|_| timed(|| rg_lines("needle", root)).0)
        .collect();
    let (rg_best, rg_median) = best_median(&mut rg_times);
    let runs: Vec<(Vec<Duration>, usize)> = (0..RUNS).map(|_| all_pages()).collect();
    let total = |times: &[Duration]| times.iter().sum::<Duration>();
    let (best, matches) = runs
        .iter()
        .min_by_key(|(times, _)| total(times))
        .expect("runs");
    // A page's time is the best of its runs: one run of one page is a few milliseconds, which a
    // loaded machine can double.
    let page = |n: usize| {
        runs.iter()
            .filter_map(|(times, _)| times.get(n - 1))
            .min()
            .copied()
            .unwrap_or_default()
    };
    let (slowest, slowest_page) = best
        .iter()
        .enumerate()
        .map(|(i, t)| (*t, i + 1))
        .max()
        .unwrap_or_default();
    println!(
        "pen_search paged through {} files ({FOLDERS} folders of {FILES}, default limits): {} pages, {matches} matches; rg: {rg_matches} matching lines",
        FOLDERS * FILES,
        best.len()
    );
    println!(
        "  rg -F -n --column once        best {:>9.1} ms  median {:>9.1} ms",
        ms(rg_best),
        ms(rg_median)
    );
    let totals: Vec<String> = runs
        .iter()
        .map(|(times, _)| format!("{:.1} ms", ms(total(times))))
        .collect();
    println!("  all pages, {RUNS} runs            {}", totals.join(", "));
    println!(
        "  all pages (best) / rg (best)  {:>9.2}    (target <= 2)",
        total(best).as_secs_f64() / rg_best.as_secs_f64()
    );
    println!(
        "  best of {RUNS} runs: page 1 {:.2} ms, page 100 {:.2} ms; slowest page of the best run {:.2} ms (page {slowest_page}); page 100 / page 1 = {:.2}  (target <= 1.5)",
        ms(page(1)),
        ms(page(100)),
        ms(slowest),
        page(100).as_secs_f64() / page(1).as_secs_f64()
    );
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
