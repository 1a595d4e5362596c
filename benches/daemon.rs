//! Daemon figures: time to answer `initialize`, idle memory, the cost of a tool call over stdio
//! against the same call in-process, one incremental edit of a 10 MB open document against
//! the same edit applied to the rope in-process, and resident memory over 10,000 tool calls
//! against the idle daemon's.
//!
//! `cargo bench --bench daemon` (`-- memory` runs only the last). Each figure is printed beside
//! a reference measured in the same run, so the ratios stay meaningful on a noisy machine.

#[path = "../tests/suite/lsp_client.rs"]
#[allow(dead_code)]
mod lsp_client;

use lsp_client::{LspClient, file_uri};
use pen::documents::{Change, DocumentStore, Position, PositionEncoding, Range};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let data = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        root.path().join("small.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .expect("write");

    if std::env::args().any(|arg| arg == "memory") {
        bench_memory(data.path(), root.path());
        return;
    }

    // 1. Spawn + initialize, against spawning the same binary for `--version`.
    let pen = PathBuf::from(env!("CARGO_BIN_EXE_pen"));
    let version_runs: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            Command::new(&pen)
                .arg("--version")
                .output()
                .expect("pen --version");
            started.elapsed()
        })
        .collect();
    let init_runs: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            let mut client = LspClient::spawn(data.path(), root.path(), &[]);
            client.initialize(root.path(), &["utf-16"]);
            let elapsed = started.elapsed();
            client.close();
            elapsed
        })
        .collect();
    let version = median(version_runs);
    let init = median(init_runs);
    println!("pen serve: spawn to initialize answered");
    println!(
        "  pen --version (process start)  {:>8.2} ms  (reference)",
        ms(version)
    );
    println!(
        "  spawn + initialize             {:>8.2} ms  ({:.2}x reference; target < 50 ms)",
        ms(init),
        ms(init) / ms(version)
    );

    // 2. Idle memory after initialize.
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    client.request("pen/getConfig", json!(null));
    let rss = client.pid().and_then(rss_kib).unwrap_or(0);
    println!("pen serve: idle resident memory after initialize");
    println!(
        "  VmRSS                          {:>8.2} MiB  (target < 20 MiB)",
        rss as f64 / 1024.0
    );

    // 3. pen/callTool pen_read of a small file over stdio, against the same call in-process.
    let args = json!({"name": "pen_read", "arguments": {"path": "small.rs"}});
    for _ in 0..100 {
        client.request("pen/callTool", args.clone());
    }
    const CALLS: u32 = 2_000;
    let started = Instant::now();
    for _ in 0..CALLS {
        client.request("pen/callTool", args.clone());
    }
    let over_stdio = started.elapsed() / CALLS;
    let workspace =
        pen::workspace::Workspace::new(&[root.path().to_path_buf()]).expect("workspace");
    let limits = pen::limits::Limits::default();
    let ledger = pen::tools::ReadLedger::default();
    let ctx = pen::tools::ToolContext {
        workspace: &workspace,
        limits: &limits,
        ledger: Some(&ledger),
        editor: None,
        recorder: None,
        sandbox: None,
    };
    let tool_args = json!({"path": "small.rs"});
    let started = Instant::now();
    for _ in 0..CALLS {
        let result = pen::tools::call("pen_read", &tool_args, &ctx);
        std::hint::black_box(pen::tools::observation(&result, &limits));
    }
    let in_process = started.elapsed() / CALLS;
    println!("pen/callTool pen_read (small file), mean of {CALLS}");
    println!(
        "  in-process tools::call         {:>8.3} ms  (reference)",
        ms(in_process)
    );
    println!(
        "  over stdio                     {:>8.3} ms",
        ms(over_stdio)
    );
    println!(
        "  stdio overhead per call        {:>8.3} ms  (target < 0.3 ms)",
        ms(over_stdio.saturating_sub(in_process))
    );

    // 4. One incremental edit of a 10 MB open document.
    let line = "fn main() { println!(\"héllo 😀 中文\"); }\r\n";
    let lines = 10 * 1024 * 1024 / line.len();
    let text = line.repeat(lines);
    let path = root.path().join("big.rs");
    std::fs::write(&path, "").expect("write");
    let uri = file_uri(&path);
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rust", "version": 1, "text": text}}),
    );
    client.request("pen/getConfig", json!(null));
    const EDITS: i32 = 2_000;
    let edit = |version: i32| {
        let at = (version as u32 * 7919) % lines as u32;
        (
            at,
            json!([{"range": {"start": {"line": at, "character": 12}, "end": {"line": at, "character": 14}}, "text": "ab"}]),
        )
    };
    let started = Instant::now();
    for version in 2..EDITS + 2 {
        let (_, changes) = edit(version);
        client.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}),
        );
    }
    // Notifications run in order, so this answer comes after every edit has been applied.
    client.request("pen/getConfig", json!(null));
    let per_edit_stdio = started.elapsed() / EDITS as u32;
    let mut store = DocumentStore::new(PositionEncoding::Utf16);
    store.open(path.clone(), 1, text.clone());
    let started = Instant::now();
    for version in 2..EDITS + 2 {
        let (at, _) = edit(version);
        let change = Change {
            range: Some(Range::new(Position::new(at, 12), Position::new(at, 14))),
            text: "ab".to_string(),
        };
        store.change(&path, version, &[change]).expect("change");
    }
    let per_edit_rope = started.elapsed() / EDITS as u32;
    println!("one incremental edit of a 10 MB open document, mean of {EDITS}");
    println!(
        "  rope edit in-process           {:>8.4} ms  (reference)",
        ms(per_edit_rope)
    );
    println!(
        "  didChange over stdio           {:>8.4} ms  ({:.1}x reference; target < 1 ms)",
        ms(per_edit_stdio),
        ms(per_edit_stdio) / ms(per_edit_rope)
    );
    client.close();
    bench_memory(data.path(), root.path());
}

/// Resident memory of a daemon over 10,000 `pen/callTool` calls, each of the read-only tools in
/// turn as a model navigating would call them, against its memory once initialized. What the
/// calls leave behind shows as growth between 2,000 and 10,000 calls.
fn bench_memory(data: &Path, root: &Path) {
    const CALLS: usize = 10_000;
    const EARLY: usize = 2_000;
    let calls = [
        json!({"name": "pen_read", "arguments": {"path": "small.rs"}}),
        json!({"name": "pen_list", "arguments": {}}),
        json!({"name": "pen_search", "arguments": {"query": "println"}}),
        json!({"name": "pen_tail", "arguments": {"path": "small.rs", "line_count": 2}}),
    ];
    let mut client = LspClient::spawn(data, root, &[]);
    client.initialize(root, &["utf-16"]);
    client.request("pen/getConfig", json!(null));
    let rss = |client: &LspClient| client.pid().and_then(rss_kib).unwrap_or(0) as f64 / 1024.0;
    let idle = rss(&client);
    let mut early = 0.0;
    for (i, call) in calls.iter().cycle().take(CALLS).enumerate() {
        let answer = client.request("pen/callTool", call.clone());
        assert!(answer.get("error").is_none(), "{call}: {answer}");
        if i + 1 == EARLY {
            early = rss(&client);
        }
    }
    let after = rss(&client);
    println!(
        "pen serve: resident memory over {CALLS} tool calls (read, list, search, tail in turn)"
    );
    println!("  idle after initialize          {idle:>8.2} MiB  (reference)");
    println!("  after {EARLY} calls              {early:>8.2} MiB");
    println!("  after {CALLS} calls             {after:>8.2} MiB");
    println!(
        "  growth over idle               {:>8.2} MiB  (target <= 2 MiB)",
        after - idle
    );
    println!(
        "  growth from {EARLY} to {CALLS} calls   {:>8.2} MiB",
        after - early
    );
    client.close();
}
