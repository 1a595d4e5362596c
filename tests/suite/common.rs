//! Helpers shared by the suite: running `pen tool` in a workspace and reading its answer.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// What one `pen tool` run printed and how it exited.
#[derive(Debug)]
pub struct ToolRun {
    pub code: i32,
    /// Stdout without its trailing newline: the observation the model would receive.
    pub stdout: String,
    pub stderr: String,
}

impl ToolRun {
    /// The observation parsed as JSON; panics with the raw text when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

/// Runs `pen tool NAME ARGS --root ROOT [extra…]`.
pub fn pen_tool(root: &Path, name: &str, args: &Value, extra: &[&str]) -> ToolRun {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .arg("tool")
        .arg(name)
        .arg(args.to_string())
        .arg("--root")
        .arg(root)
        .args(extra)
        // Hermetic: no user config file or PEN_* variable reaches the test.
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
        .output()
        .expect("run pen");
    let mut stdout = String::from_utf8(output.stdout).expect("stdout is UTF-8");
    if stdout.ends_with('\n') {
        stdout.pop();
    }
    ToolRun {
        code: output.status.code().unwrap_or(-1),
        stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Calls a tool in-process in a workspace rooted at `root` with the given cap; returns the
/// result and the observation string the model would receive.
pub fn call_tool(
    root: &Path,
    cap: usize,
    name: &str,
    args: &Value,
) -> (Result<Value, pen::tools::ToolError>, String) {
    let workspace = pen::workspace::Workspace::new(&[root.to_path_buf()]).expect("workspace");
    let limits = pen::limits::Limits::with_max_tool_result_bytes(cap as u64).expect("cap in range");
    let ctx = pen::tools::ToolContext::plain(&workspace, &limits);
    let result = pen::tools::call(name, args, &ctx);
    let observation = pen::tools::observation(&result, &limits);
    (result, observation)
}

/// The number in the environment variable `name`, else `default` (the scale of a test that a
/// script runs larger).
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Waits for `child` to exit, at most `limit`; kills it and fails when it does not.
pub fn wait_bounded(child: &mut std::process::Child, limit: std::time::Duration) -> i32 {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("pen did not exit within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Makes a FIFO at `path` (what a hostile repository can hold where pen expects a file).
pub fn make_fifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}
