//! Workspace confinement under races: a second thread swaps a folder of the workspace for a
//! symlink to an outside folder in a tight loop while each tool is called on paths through it.
//!
//! Every call must either work inside the workspace or be refused: no byte of the outside
//! folder in any result, no file created or changed there, no `.pen-` temp file left anywhere.
//! Each tool runs `PEN_RACE_RUNS` calls (default 1,000; pen_command a fifth of it, since each
//! call starts a process); `scripts/race.sh` repeats the race at 10,000 calls per tool. The
//! figures are printed (`cargo test --test all suite::confinement -- --nocapture`).

use pen::limits::Limits;
use pen::tools::{ToolContext, ToolError};
use pen::workspace::Workspace;
use rustix::fs::{CWD, RenameFlags};
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

/// What every outside file holds; a result that contains it read outside the workspace.
const MARKER: &str = "OUTSIDE-MARKER";

/// A listing entry only the outside folder has.
const OUTSIDE_ONLY: &str = "only-OUTSIDE-MARKER.txt";

/// Folders below the swapped one: the longer the path after it, the longer a tool that checks
/// a path and then opens it again leaves the swap to land in between.
const DEEP: &str = "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/z/0/1/2/3/4/5";

/// The longest a swap state lasts before the next swap.
const DWELL_NANOS: u64 = 4_000;

fn runs() -> usize {
    std::env::var("PEN_RACE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// A workspace `ws` with a folder `ws/dir`, an outside folder beside it with the same names
/// and marked content, and a prepared symlink `ws/.swap` to the outside folder.
struct Race {
    _base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

impl Race {
    fn new() -> Race {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let outside = base.path().join("outside");
        fs::create_dir_all(ws.join("dir").join(DEEP)).unwrap();
        fs::create_dir_all(outside.join(DEEP)).unwrap();
        fs::write(ws.join("dir/f.txt"), "alpha inside needle\n").unwrap();
        fs::write(
            ws.join("dir").join(DEEP).join("g.txt"),
            "alpha inside needle\n",
        )
        .unwrap();
        fs::write(
            outside.join(DEEP).join("g.txt"),
            format!("alpha {MARKER} needle\n"),
        )
        .unwrap();
        fs::write(outside.join("f.txt"), format!("alpha {MARKER} needle\n")).unwrap();
        fs::write(outside.join(OUTSIDE_ONLY), format!("{MARKER} needle\n")).unwrap();
        fs::write(
            outside.join(DEEP).join(OUTSIDE_ONLY),
            format!("{MARKER} needle\n"),
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, ws.join(".swap")).unwrap();
        Race {
            _base: base,
            ws,
            outside,
        }
    }

    /// Every file under the outside folder with its content, to compare before and after.
    fn outside_state(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        collect(&self.outside, &mut files);
        files.sort();
        files
    }

    /// `.pen-` temp files left anywhere, inside the workspace or outside it.
    fn stray_temp_files(&self) -> usize {
        let mut files = Vec::new();
        collect(&self.outside, &mut files);
        collect(&self.ws, &mut files);
        files
            .iter()
            .filter(|(path, _)| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".pen-"))
            })
            .count()
    }
}

/// Files below `dir`, not following symlinks.
fn collect(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect(&entry.path(), out);
        } else if kind.is_file() {
            out.push((entry.path(), fs::read(entry.path()).unwrap_or_default()));
        }
    }
}

/// The thread that swaps `ws/dir` and `ws/.swap` (the real folder and the symlink to the
/// outside) with `renameat2(RENAME_EXCHANGE)` until it is told to stop. Dropping it stops it
/// and leaves the real folder at `ws/dir`.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
    ws: PathBuf,
}

impl Swapper {
    fn start(ws: &Path) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (dir, swap) = (ws.join("dir"), ws.join(".swap"));
        let thread = {
            let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(CWD, &dir, CWD, &swap, RenameFlags::EXCHANGE)
                        .expect("RENAME_EXCHANGE");
                    swaps.fetch_add(1, Ordering::Relaxed);
                    // Each state lasts a random few microseconds, so that swaps land at every
                    // point of a call rather than in the rhythm of the rename itself.
                    let dwell = std::time::Instant::now();
                    let spin = std::time::Duration::from_nanos(fastrand::u64(0..DWELL_NANOS));
                    while dwell.elapsed() < spin {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        Swapper {
            stop,
            swaps,
            thread: Some(thread),
            ws: ws.to_path_buf(),
        }
    }

    /// Stops swapping and puts the real folder back at `ws/dir`; returns the swaps made.
    fn finish(mut self) -> u64 {
        self.halt();
        self.swaps.load(Ordering::Relaxed)
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("swapper thread");
        }
        let dir = self.ws.join("dir");
        if fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            rustix::fs::renameat_with(CWD, &dir, CWD, self.ws.join(".swap"), RenameFlags::EXCHANGE)
                .expect("RENAME_EXCHANGE back");
        }
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The figures of one tool's race.
#[derive(Debug, Default)]
struct Figures {
    runs: usize,
    /// Calls that read, listed, wrote or ran outside the workspace.
    escapes: usize,
    /// Calls that worked, inside.
    inside: usize,
    /// Calls refused or failed (the folder was a symlink, or changed while opened).
    refused: usize,
    stray_temp_files: usize,
    swaps: u64,
}

impl Figures {
    fn report(&self, tool: &str) {
        println!(
            "{tool}: runs {}, escapes {}, stray temp files {} (inside {}, refused {}, swaps {})",
            self.runs, self.escapes, self.stray_temp_files, self.inside, self.refused, self.swaps
        );
    }

    /// No escape, no stray temp file, and a race that really ran: the folder was swapped and
    /// calls met the symlink (the same call worked before the race, see [`race`]).
    fn check(&self, tool: &str) {
        self.report(tool);
        assert_eq!(self.escapes, 0, "{tool} escaped the workspace: {self:?}");
        assert_eq!(self.stray_temp_files, 0, "{tool} left temp files: {self:?}");
        assert!(
            self.swaps > 0,
            "{tool}: the swapper never swapped: {self:?}"
        );
        assert!(
            self.refused + self.escapes > 0,
            "{tool}: no call met the swapped folder: {self:?}"
        );
    }
}

/// Races `runs` calls of one tool against the swapper. `escaped` judges a call from its
/// result and the outside folder's state before it; it may restore the outside folder.
fn race(
    tool: &str,
    runs: usize,
    args: impl Fn(usize) -> Value,
    escaped: impl Fn(&Race, &Result<Value, ToolError>, &[(PathBuf, Vec<u8>)]) -> bool,
) -> Figures {
    // One race at a time: a swapper and a caller per core is what makes the swaps land
    // inside calls; seven races at once would mostly take turns on the cores.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fixture = Race::new();
    let workspace = Workspace::new(std::slice::from_ref(&fixture.ws)).unwrap();
    let limits = Limits::default();
    let ctx = ToolContext::plain(&workspace, &limits);
    // Before the race, the same call works inside: a refusal during it is the swap's doing.
    let calm = pen::tools::call(tool, &args(runs), &ctx);
    assert!(
        calm.is_ok() && !escaped(&fixture, &calm, &fixture.outside_state()),
        "{tool} fails without a race: {calm:?}"
    );
    let mut figures = Figures {
        runs,
        ..Figures::default()
    };
    let swapper = Swapper::start(&fixture.ws);
    for i in 0..runs {
        let before = fixture.outside_state();
        let result = pen::tools::call(tool, &args(i), &ctx);
        if escaped(&fixture, &result, &before) {
            figures.escapes += 1;
        } else if result.is_ok() {
            figures.inside += 1;
        } else {
            if std::env::var("PEN_RACE_DEBUG").is_ok() {
                eprintln!("{tool}: {:?}", result.as_ref().err().map(|e| &e.message));
            }
            figures.refused += 1;
        }
    }
    figures.swaps = swapper.finish();
    figures.stray_temp_files = fixture.stray_temp_files();
    figures
}

/// A read escaped when the marker is anywhere in its result or error.
fn marked(result: &Result<Value, ToolError>) -> bool {
    match result {
        Ok(value) => value.to_string().contains(MARKER),
        Err(err) => err.message.contains(MARKER),
    }
}

/// A write escaped when the outside folder changed; it is put back for the next call.
fn outside_changed(fixture: &Race, before: &[(PathBuf, Vec<u8>)]) -> bool {
    let after = fixture.outside_state();
    if after == before {
        return false;
    }
    for (path, _) in &after {
        if !before.iter().any(|(p, _)| p == path) {
            let _ = fs::remove_file(path);
        }
    }
    for (path, bytes) in before {
        let _ = fs::write(path, bytes);
    }
    true
}

#[test]
fn pen_read_stays_inside_while_a_folder_is_swapped() {
    race(
        "pen_read",
        runs(),
        |_| json!({"path": format!("dir/{DEEP}/g.txt")}),
        |_, result, _| marked(result),
    )
    .check("pen_read");
}

#[test]
fn pen_tail_stays_inside_while_a_folder_is_swapped() {
    race(
        "pen_tail",
        runs(),
        |_| json!({"path": format!("dir/{DEEP}/g.txt")}),
        |_, result, _| marked(result),
    )
    .check("pen_tail");
}

#[test]
fn pen_list_stays_inside_while_a_folder_is_swapped() {
    race(
        "pen_list",
        runs(),
        |_| json!({"path": format!("dir/{DEEP}")}),
        |_, result, _| marked(result),
    )
    .check("pen_list");
}

#[test]
fn pen_search_reads_nothing_outside_while_a_folder_is_swapped() {
    // The walk goes by path, so a swap mid-walk may show it an outside folder's names; what
    // must never appear is a byte read from an outside file (the marker and its line).
    race(
        "pen_search",
        runs(),
        |i| {
            if i % 2 == 0 {
                json!({"query": "needle", "path": "dir"})
            } else {
                json!({"query": "needle"})
            }
        },
        |_, result, _| {
            let value = result.as_ref().map(Value::to_string).unwrap_or_default();
            value.contains(&format!("{MARKER} needle"))
        },
    )
    .check("pen_search");
}

#[test]
fn pen_find_names_nothing_outside_while_a_folder_is_swapped() {
    // The walk goes by path, so a swap mid-walk may list an outside folder; each file pen_find
    // names is opened beneath the root first, so no outside name (the marker is in them) shows.
    race(
        "pen_find",
        runs(),
        |i| {
            if i % 2 == 0 {
                json!({"glob": "*.txt", "path": "dir"})
            } else {
                json!({"glob": "*.txt"})
            }
        },
        |_, result, _| marked(result),
    )
    .check("pen_find");
}

#[test]
fn pen_create_writes_nothing_outside_while_a_folder_is_swapped() {
    race(
        "pen_create",
        runs(),
        |i| json!({"path": format!("dir/{DEEP}/new-{i}.txt"), "content": "created\n"}),
        |fixture, _, before| outside_changed(fixture, before),
    )
    .check("pen_create");
}

#[test]
fn pen_edit_changes_nothing_outside_while_a_folder_is_swapped() {
    // Each call puts a `!` after the one `alpha` of the file, which the outside file has too:
    // every call that works changes its file, and one that reached the outside file shows.
    race(
        "pen_edit",
        runs(),
        |_| {
            json!({"path": format!("dir/{DEEP}/g.txt"), "edits": [{"old_text": "alpha", "new_text": "alpha!"}]})
        },
        |fixture, _, before| outside_changed(fixture, before),
    )
    .check("pen_edit");
}

#[test]
fn pen_command_never_runs_outside_while_a_folder_is_swapped() {
    race(
        "pen_command",
        runs().div_ceil(5),
        |_| json!({"command": "pwd -P", "cwd": format!("dir/{DEEP}")}),
        |fixture, result, _| {
            let stdout = result
                .as_ref()
                .ok()
                .and_then(|v| v["stdout"].as_str())
                .unwrap_or_default();
            stdout.starts_with(&*fixture.outside.to_string_lossy())
        },
    )
    .check("pen_command");
}
