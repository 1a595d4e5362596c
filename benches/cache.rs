//! The cost of information: budget policy 3 and policy 4 side by side, on the same work, in one
//! run. `cargo bench --bench cache` (the figures are counts, the same in every profile:
//! `cargo bench --profile dev --bench cache` gives them without a release build).
//!
//! The real loop (the [`Engine`], with its OpenAI backend and pen's tools) works against the
//! fake provider of the integration suite, a real HTTP server on 127.0.0.1 whose scripted model
//! (`cache_figures::scripted_reply`) works through a list of tasks and follows every result's
//! cursor to its end, so both policies deliver the same information whatever their pages. The
//! server reports its window (`/props`), so pen plans with its default settings for a found
//! window (output ¼ of it at most 4,096, margin 1/32 at most 2,560), and it rejects a body over
//! the window (4 bytes a token) as a provider does.
//!
//! Workloads, over real source files: pen's dependencies at the versions `Cargo.lock` pins, from
//! the cargo registry (there on any machine that built pen's benches; sorted by path, the first
//! that fit):
//! - (a) tokio's first 75 files of 2–40 KB (575 KB), each read to its end;
//! - (b) a mixed session over tokio: searches with few and many matches (each page of them),
//!   small lists, small and large reads (to their end), short commands, a read that fails, an
//!   edit denied;
//! - (c) tokio's first 200 files of 2–40 KB (1.9 MB), each read to its end;
//! - the peer-shaped runs: 80 files of 2–6 KB read whole at 16k, and 200 at 128k (tokio's,
//!   then futures-util's and tower's).
//!
//! Per row: completed, requests, input tokens, the largest request ÷ the window, rejections,
//! the cost under two price shapes, bytes of tool results the model saw, compactions, and the
//! prefix share (a diagnostic). Costs are in uncached input tokens (tokens = bytes ÷ 4), each
//! request's prefix shared with the request before it (in the order a cache reads a request:
//! tools, system, messages) at the cached price, the rest at the uncached one:
//! - write 1.25: Anthropic's shape, cache read 0.1, the rest written to the cache at 1.25;
//! - cached 0.25: OpenAI's shape, cached input 0.25, no write premium;
//! - the peers' model (issue 25): shared 0.1, the rest 1.
//!
//! `-- sweep` prints policy 4's cost at low-water marks 20–80% instead (item 3 of issue 25:
//! the mark chosen by cost); `-- low-water=N` runs policy 4 at another mark than the default.

#[allow(dead_code)]
#[path = "../tests/suite/fake_provider.rs"]
mod fake_provider;

#[allow(dead_code)]
#[path = "../tests/suite/cache_figures.rs"]
mod cache_figures;

use cache_figures::Task;
use futures::future::BoxFuture;
use pen::agent::{
    AgentEvent, ApprovalAnswer, ApprovalRequest, Approver, Engine, LocalTools, StopReason, Trim,
    TurnEvent, TurnSpec, TurnTools,
};
use pen::config::Config;
use pen::session::SessionStore;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

const WINDOWS: [u64; 4] = [8_000, 16_000, 32_000, 128_000];

/// A price shape: what a token of a request's prefix shared with the request before it costs,
/// and what the rest costs, in uncached input tokens.
#[derive(Debug, Clone, Copy)]
struct Price {
    cached: f64,
    rest: f64,
}

const WRITE_PREMIUM: Price = Price {
    cached: 0.1,
    rest: 1.25,
};
const CACHED_QUARTER: Price = Price {
    cached: 0.25,
    rest: 1.0,
};
const PEERS: Price = Price {
    cached: 0.1,
    rest: 1.0,
};

/// Edits are not approved: an edit the model asks for is denied.
struct Nobody;

impl Approver for Nobody {
    fn ask(&self, _: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        Box::pin(async { Err("nobody".into()) })
    }
}

/// The cargo registry's sources, where pen's dependencies are unpacked at the versions
/// Cargo.lock pins (there on any machine that built pen's benches).
struct Registry {
    sources: PathBuf,
    lock: String,
}

impl Registry {
    fn open() -> Registry {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
            .expect("Cargo.lock");
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
            .expect("CARGO_HOME or HOME");
        let registry = home.join("registry/src");
        // One index folder per registry: crates.io's.
        let sources = std::fs::read_dir(&registry)
            .expect("the cargo registry's sources")
            .filter_map(Result::ok)
            .map(|index| index.path())
            .find(|index| {
                index
                    .join(format!("tokio-{}", version(&lock, "tokio")))
                    .is_dir()
            })
            .unwrap_or_else(|| panic!("tokio's sources under {}", registry.display()));
        Registry { sources, lock }
    }

    /// The `.rs` files of `krate`'s `src` (at the locked version) of `min..=max` bytes, as
    /// paths relative to the registry's sources, sorted.
    fn files(&self, krate: &str, min: u64, max: u64) -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir)
                .expect("read a folder")
                .filter_map(Result::ok)
            {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let mut all = Vec::new();
        let dir = format!("{krate}-{}", version(&self.lock, krate));
        walk(&self.sources.join(&dir).join("src"), &mut all);
        let mut sized: Vec<String> = all
            .into_iter()
            .filter(|path| {
                let len = std::fs::metadata(path).map_or(0, |m| m.len());
                (min..=max).contains(&len)
            })
            .filter_map(|path| {
                path.strip_prefix(&self.sources)
                    .ok()
                    .map(|p| p.to_string_lossy().into_owned())
            })
            .collect();
        sized.sort();
        sized
    }
}

/// The first version Cargo.lock pins for `krate`.
fn version(lock: &str, krate: &str) -> String {
    lock.split("[[package]]")
        .find(|package| package.contains(&format!("\nname = \"{krate}\"\n")))
        .and_then(|package| package.split("version = \"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("{krate} in Cargo.lock"))
        .to_string()
}

/// A workload: its name, the tasks of its turn, and the files its workspace holds.
struct Workload {
    name: &'static str,
    tasks: Vec<Task>,
    files: Vec<String>,
}

fn reads(name: &'static str, files: Vec<String>) -> Workload {
    Workload {
        name,
        tasks: files
            .iter()
            .map(|path| Task::new("pen_read", json!({ "path": path })))
            .collect(),
        files,
    }
}

/// The folders of tokio the mixed workload lists and searches.
const FOLDERS: [&str; 6] = ["fs", "io", "net", "process", "signal", "sync"];

/// Workload (b): twelve rounds of a search with few matches, a search with many (all of their
/// pages), a small list, a small and a large read (to their end), a short command, a read of a
/// missing file and an edit the owner denies.
fn mixed(registry: &Registry) -> Workload {
    let small = registry.files("tokio", 2_000, 6_000);
    let large = registry.files("tokio", 20_000, 40_000);
    let src = format!("tokio-{}/src", version(&registry.lock, "tokio"));
    let mut tasks = Vec::new();
    for round in 0..12 {
        let folder = format!("{src}/{}", FOLDERS[round % FOLDERS.len()]);
        tasks.extend([
            Task::new(
                "pen_search",
                json!({"query": "fn poll_", "path": small[round].clone()}),
            ),
            Task::new("pen_search", json!({"query": "pub fn", "path": folder})),
            Task::new("pen_list", json!({ "path": folder })),
            Task::new("pen_read", json!({"path": small[round + 12].clone()})),
            Task::new("pen_read", json!({"path": large[round].clone()})),
            Task::new(
                "pen_command",
                json!({"command": format!("echo round {round}")}),
            ),
            Task::new(
                "pen_read",
                json!({"path": format!("{src}/missing_{round}.rs")}),
            ),
            Task::new(
                "pen_edit",
                json!({"path": small[round].clone(), "edits": [{"old_text": "use ", "new_text": "use  "}]}),
            ),
        ]);
    }
    // Every file of the folders it lists and searches.
    let files = registry
        .files("tokio", 0, u64::MAX)
        .into_iter()
        .filter(|file| {
            FOLDERS
                .iter()
                .any(|folder| file.starts_with(&format!("{src}/{folder}/")))
        })
        .chain(small)
        .chain(large)
        .collect();
    Workload {
        name: "(b) mixed",
        tasks,
        files,
    }
}

/// A workspace holding every workload's files, at their paths in the registry.
fn workspace(registry: &Registry, workloads: &[&Workload]) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    for file in workloads.iter().flat_map(|w| &w.files) {
        let to = root.path().join(file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).expect("create a folder");
        }
        std::fs::copy(registry.sources.join(file), to).expect("copy a file");
    }
    root
}

/// What one run's requests cost and carried.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    requests: usize,
    /// Every request's tokens, summed.
    input_tokens: f64,
    largest_tokens: f64,
    write_premium: f64,
    cached_quarter: f64,
    peers: f64,
    /// Shared bytes ÷ all bytes (the first request shares nothing): a diagnostic.
    prefix_share: f64,
    /// The bytes of the tool results the requests carried (each counted once).
    result_bytes: usize,
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn figures(bodies: &[Value]) -> Figures {
    let forms: Vec<Vec<u8>> = bodies.iter().map(cache_figures::cache_order).collect();
    let mut f = Figures {
        requests: bodies.len(),
        ..Figures::default()
    };
    let (mut shared_bytes, mut all_bytes) = (0usize, 0usize);
    for (i, form) in forms.iter().enumerate() {
        let shared = if i == 0 {
            0
        } else {
            shared_prefix(&forms[i - 1], form)
        };
        let (shared_tokens, rest_tokens) =
            (shared as f64 / 4.0, (form.len() - shared) as f64 / 4.0);
        let cost = |price: Price| price.cached * shared_tokens + price.rest * rest_tokens;
        f.write_premium += cost(WRITE_PREMIUM);
        f.cached_quarter += cost(CACHED_QUARTER);
        f.peers += cost(PEERS);
        f.input_tokens += form.len() as f64 / 4.0;
        f.largest_tokens = f.largest_tokens.max(form.len() as f64 / 4.0);
        shared_bytes += shared;
        all_bytes += form.len();
    }
    f.prefix_share = shared_bytes as f64 / all_bytes.max(1) as f64;
    let mut seen = std::collections::HashSet::new();
    for body in bodies {
        for message in body["messages"].as_array().into_iter().flatten() {
            if message["role"] == "tool" && seen.insert(message["tool_call_id"].to_string()) {
                f.result_bytes += message["content"].as_str().map_or(0, str::len);
            }
        }
    }
    f
}

struct Run {
    completed: bool,
    stop_reason: StopReason,
    last_error: Option<String>,
    figures: Figures,
    compactions: u64,
    rejected: usize,
}

fn run(
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    workload: &Workload,
    window: u64,
    policy: u64,
    low_water: Option<u64>,
) -> Run {
    let fake = fake_provider::FakeProvider::start();
    fake.discovery(
        "/props",
        json!({"default_generation_settings": {"n_ctx": window}}),
    );
    let window_bytes = usize::try_from(window * 4).unwrap_or(usize::MAX);
    fake.reject_bodies_over(
        window_bytes,
        fake_provider::openai_error(
            400,
            "This model's maximum context length is exceeded.",
            "invalid_request_error",
            Some("context_length_exceeded"),
        ),
    );
    let tasks = workload.tasks.clone();
    fake.respond_with(move |number, body| cache_figures::scripted_reply(&tasks, number, body));
    let data = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SessionStore::open(data.path()).expect("store"));
    let session = store.new_session(None).expect("session").id;
    let engine = Engine::new(Arc::clone(&store));
    let mut config = Config::default();
    for (key, value) in [
        ("provider", json!("openai")),
        ("base_url", json!(format!("{}/v1", fake.url()))),
        ("model", json!("fake-model")),
        ("max_turn_requests", json!(1_000)),
        ("auto_approve", json!(["pen_command"])),
        ("budget_policy", json!(policy)),
    ] {
        config.set(key, &value).expect("a valid setting");
    }
    if let Some(percent) = low_water {
        config
            .set("compaction_low_water_percent", &json!(percent))
            .expect("a low-water mark within its bounds");
    }
    let limits = config.limits();
    let compactions = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&compactions);
    let spec = TurnSpec {
        config,
        tools: Arc::new(TurnTools::native(LocalTools {
            workspace: pen::workspace::Workspace::new(&[root.to_path_buf()]).expect("workspace"),
            limits,
            ledger: Arc::default(),
            editor: None,
            search_editor: None,
            watch: None,
            fitted: Default::default(),
            sandbox: pen::sandbox::CommandSandbox::off(),
        })),
        approver: Arc::new(Nobody),
        on_event: Arc::new(move |event: AgentEvent| {
            if let TurnEvent::ContextTrimmed(Trim::Budget(_)) = event.event {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }),
    };
    let outcome = runtime.block_on(engine.run_turn(
        &session,
        "Work through the tasks.",
        spec,
        CancellationToken::new(),
    ));
    let requests = fake.requests();
    let rejected = requests
        .iter()
        .filter(|r| r.raw_body.len() > window_bytes)
        .count();
    let bodies: Vec<Value> = requests
        .into_iter()
        .filter(|r| r.raw_body.len() <= window_bytes)
        .map(|r| r.body)
        .collect();
    // Completed: the turn ended with the model's final answer, which it gives after its last
    // task.
    let done = bodies.last().is_some_and(|body| {
        matches!(
            cache_figures::scripted_reply(&workload.tasks, 0, body),
            fake_provider::Reply::Stream(ref frames) if frames.concat().contains("Done.")
        )
    });
    Run {
        completed: outcome.stop_reason == StopReason::EndTurn && done,
        stop_reason: outcome.stop_reason,
        last_error: outcome.last_error,
        figures: figures(&bodies),
        compactions: compactions.load(Ordering::SeqCst),
        rejected,
    }
}

fn thousands(tokens: f64) -> String {
    format!("{:.0}k", tokens / 1_000.0)
}

fn row(workload: &str, window: u64, policy: u64, run: &Run, base: Option<&Run>) {
    let f = &run.figures;
    // A ratio to a run that did not complete compares different work: none is shown.
    let ratio = |value: f64, of: fn(&Figures) -> f64| match base {
        Some(base) if base.completed => format!("{:>6.3}x", value / of(&base.figures).max(1e-9)),
        Some(_) => "    n/a".to_string(),
        None => "       ".to_string(),
    };
    println!(
        "  {workload:<10} {:>4}k  {policy}  {:>9} {:>5}{}  {:>7}{}  {:>5.2}  {:>3}  {:>7}{}  {:>7}{}  {:>8.2} MB  {:>4}  {:>5.1}%",
        window / 1_000,
        if run.completed {
            "yes".to_string()
        } else {
            format!("{:?}", run.stop_reason)
        },
        f.requests,
        ratio(f.requests as f64, |f| f.requests as f64),
        thousands(f.input_tokens),
        ratio(f.input_tokens, |f| f.input_tokens),
        f.largest_tokens / window as f64,
        run.rejected,
        thousands(f.write_premium),
        ratio(f.write_premium, |f| f.write_premium),
        thousands(f.cached_quarter),
        ratio(f.cached_quarter, |f| f.cached_quarter),
        f.result_bytes as f64 / 1e6,
        run.compactions,
        f.prefix_share * 100.0,
    );
}

/// The reason a run did not complete, when it did not.
fn failure(run: &Run) {
    if !run.completed {
        println!(
            "      not completed: {:?}, {}",
            run.stop_reason,
            run.last_error.as_deref().unwrap_or("no error")
        );
    }
}

/// Workloads (a), (b), (c) at every window, policy 3 then 4 (with its ratios to policy 3).
fn table(
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    workloads: &[&Workload],
    low_water: Option<u64>,
) {
    println!(
        "  workload   window  p  completed  requests        input        max/w  rej  cost write 1.25   cost cached 0.25   results seen  cmp  prefix"
    );
    for workload in workloads {
        for window in WINDOWS {
            let three = run(runtime, root, workload, window, 3, None);
            row(workload.name, window, 3, &three, None);
            failure(&three);
            let four = run(runtime, root, workload, window, 4, low_water);
            row(workload.name, window, 4, &four, Some(&three));
            failure(&four);
        }
    }
}

/// The peer-shaped runs under the peers' cost model.
fn peers(
    runtime: &tokio::runtime::Runtime,
    root: &Path,
    shaped: &[(&Workload, u64)],
    low_water: Option<u64>,
) {
    println!("  peer-shaped runs, cost = shared prefix 0.1 + the rest 1 (tokens = bytes / 4):");
    for (workload, window) in shaped {
        for policy in [3, 4] {
            let run = run(
                runtime,
                root,
                workload,
                *window,
                policy,
                if policy == 4 { low_water } else { None },
            );
            println!(
                "  {:<22} {:>4}k  policy {policy}  completed {:<5}  {:>4} requests  cost {:>6}  max/w {:.2}  rejected {}",
                workload.name,
                window / 1_000,
                run.completed,
                run.figures.requests,
                thousands(run.figures.peers),
                run.figures.largest_tokens / *window as f64,
                run.rejected,
            );
        }
    }
}

/// Policy 4's cost at low-water marks 20–80%, ÷ policy 3's under both price shapes, and its
/// cost under the peers' model, for each workload and window.
fn sweep(runtime: &tokio::runtime::Runtime, root: &Path, runs: &[(&Workload, u64)]) {
    const MARKS: [u64; 7] = [20, 30, 40, 50, 60, 70, 80];
    println!(
        "  policy 4 at low-water marks {MARKS:?}: cost ÷ policy 3 (write 1.25 | cached 0.25), the peers' cost, requests ÷ policy 3 (! = not completed)"
    );
    for (workload, window) in runs {
        let three = run(runtime, root, workload, *window, 3, None);
        let (mut write, mut cached, mut peers, mut requests) =
            (String::new(), String::new(), String::new(), String::new());
        for mark in MARKS {
            let four = run(runtime, root, workload, *window, 4, Some(mark));
            let done = if four.completed { "" } else { "!" };
            let (f, t) = (&four.figures, &three.figures);
            write.push_str(&format!(" {:.3}{done}", f.write_premium / t.write_premium));
            cached.push_str(&format!(
                " {:.3}{done}",
                f.cached_quarter / t.cached_quarter
            ));
            peers.push_str(&format!(" {:>6}", thousands(f.peers)));
            requests.push_str(&format!(" {:.2}", f.requests as f64 / t.requests as f64));
        }
        println!(
            "  {:<20} {:>4}k  write{write}  | cached{cached}  | peers{peers}  | requests{requests}",
            workload.name,
            window / 1_000
        );
    }
}

fn main() {
    let low_water = std::env::args()
        .find_map(|arg| arg.strip_prefix("low-water=").map(str::to_string))
        .and_then(|n| n.parse::<u64>().ok());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let registry = Registry::open();
    let sized = registry.files("tokio", 2_000, 40_000);
    let a = reads("(a) 75", sized.iter().take(75).cloned().collect());
    let b = mixed(&registry);
    let c = reads("(c) 200", sized.iter().take(200).cloned().collect());
    let small: Vec<String> = ["tokio", "futures-util", "tower"]
        .iter()
        .flat_map(|krate| registry.files(krate, 2_000, 6_000))
        .collect();
    let whole_80 = reads(
        "80 files of 2-6 KB",
        small.iter().take(80).cloned().collect(),
    );
    let whole_200 = reads(
        "200 files of 2-6 KB",
        small.iter().take(200).cloned().collect(),
    );
    let root = workspace(&registry, &[&a, &b, &c, &whole_200]);
    println!(
        "the cost of information: the same tasks through the real loop and the fake provider; files from {}",
        registry.sources.display()
    );
    for workload in [&a, &b, &c, &whole_80, &whole_200] {
        let bytes: u64 = workload
            .files
            .iter()
            .map(|f| std::fs::metadata(registry.sources.join(f)).map_or(0, |m| m.len()))
            .sum();
        println!(
            "  {:<20} {:>4} tasks over {:>4} files, {:>5} KB",
            workload.name,
            workload.tasks.len(),
            workload.files.len(),
            bytes / 1_000
        );
    }
    if std::env::args().any(|arg| arg == "sweep") {
        let mut runs: Vec<(&Workload, u64)> = Vec::new();
        for workload in [&a, &b, &c] {
            runs.extend(WINDOWS.map(|window| (workload, window)));
        }
        runs.extend([(&whole_80, 16_000), (&whole_200, 128_000)]);
        sweep(&runtime, root.path(), &runs);
        return;
    }
    table(&runtime, root.path(), &[&a, &b, &c], low_water);
    println!();
    peers(
        &runtime,
        root.path(),
        &[(&whole_80, 16_000), (&whole_200, 128_000)],
        low_water,
    );
}
