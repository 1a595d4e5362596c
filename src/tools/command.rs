//! pen_command: one shell command in the workspace, with a timeout, capped output (head and
//! tail kept) and its own process group, so that a timeout or Stop kills everything it started.
//!
//! It is the one tool that runs for an unbounded time, so it is async and takes a cancellation
//! token. Approval is the agent loop's business, not this module's.

use super::budget::{self, escaped_len, fitting_prefix};
use super::subject::Subject;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::{
    COMMAND_DEFAULT_TIMEOUT, COMMAND_DRAIN_TIMEOUT, COMMAND_MAX_TIMEOUT, COMMAND_READ_CHUNK_BYTES,
    Limits,
};
use crate::sandbox;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub command: String,
    pub cwd: Option<String>,
    pub timeout_secs: Option<u64>,
    /// `"off"`: run outside the OS sandbox (the owner is always asked first).
    pub sandbox: Option<String>,
    /// Why the call needs to leave the sandbox, shown to the owner.
    pub reason: Option<String>,
}

/// What a call runs: the command line (its `cwd` is no file it works on).
pub fn subject(arguments: &Value) -> Subject {
    Subject {
        summary: super::subject::text(arguments, "command")
            .unwrap_or_default()
            .to_string(),
        ..Subject::default()
    }
}

/// The tool's text; its timeouts are named from [`COMMAND_DEFAULT_TIMEOUT`] and
/// [`COMMAND_MAX_TIMEOUT`], which are not configurable.
pub fn spec(_: &Limits) -> ToolDoc {
    let default = COMMAND_DEFAULT_TIMEOUT.as_secs();
    let max = COMMAND_MAX_TIMEOUT.as_secs();
    ToolDoc {
        description: format!(
            "Run a shell command (sh -c) in the workspace: exit code and output (head and tail of stdout \
            and stderr kept; `truncated` says so). May ask the owner. Runs in an OS sandbox unless the owner \
            turned it off: writes only in the workspace and $TMPDIR, no network. Killed with all it started \
            after `timeout_secs` (default {default}, max {max}) or on Stop. Output is read until every \
            process holding it exits: redirect a background process's output (`srv > log 2>&1 &`) or the \
            call lasts until the timeout. Prefer the file tools to read, search and edit."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line."},
                "cwd": {"type": "string", "description": "Working directory relative to the workspace root (default: the root)."},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": max},
                "sandbox": {"enum": ["off"], "description": "Leave the sandbox; asks the owner. Say why in `reason`."},
                "reason": {"type": "string"}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// `sh` exited and every process holding its output had closed it.
    Exited,
    /// `timeout_secs` passed first; the group was killed.
    TimedOut,
    /// The owner stopped the turn; the group was killed.
    Stopped,
}

/// Runs the command. A Stop kills it and returns an error whose message asks to inspect the
/// state before retrying: whatever it did before it was killed is unknown.
pub async fn run(
    args: Args,
    ctx: &ToolContext<'_>,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "command is empty",
        ));
    }
    let timeout = match args.timeout_secs {
        Some(0) => {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                "timeout_secs must be at least 1",
            ));
        }
        Some(secs) => Duration::from_secs(secs).min(COMMAND_MAX_TIMEOUT),
        None => COMMAND_DEFAULT_TIMEOUT,
    };
    let opened = ctx.open(args.cwd.as_deref().unwrap_or(""))?;
    let dir = &opened.resolved;
    let Some(dir_fd) = opened.dir_fd() else {
        return Err(ToolError::new(
            ErrorCode::NotADirectory,
            format!("{} is not a directory", shown(&dir.display)),
        ));
    };
    let cwd = confined_cwd(ctx.workspace, dir_fd, &dir.display)?;
    let leaves = match args.sandbox.as_deref() {
        None => false,
        Some("off") => true,
        Some(other) => {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "sandbox must be \"off\" (to run outside the OS sandbox), got {}",
                    shown(other)
                ),
            ));
        }
    };
    let sandbox = ctx.sandbox.filter(|sandbox| {
        sandbox.level != sandbox::Level::Off && sandbox.support.is_ok() && !leaves
    });
    let mut envelope = json!({
        "command": args.command, "cwd": dir.display, "exit_code": -999, "signal": 99, "timed_out": false,
        "stdout": "", "stderr": "", "stdout_bytes": u64::MAX, "stderr_bytes": u64::MAX, "truncated": false,
    });
    if sandbox.is_some() {
        envelope["sandbox"] = json!("workspace-write");
        envelope["sandbox_blocked"] = json!({"note": sandbox::BLOCKED_NOTE, "lines": []});
    }
    // Each stream gets half the budget.
    let stream_budget = budget::page_budget(&envelope, ctx.limits)? / 2;

    // A sandboxed command runs in `pen __sandbox-exec`, with its own temporary folder.
    let private_tmp = match sandbox {
        Some(_) => Some(
            tempfile::Builder::new()
                .prefix("pen-command-")
                .tempdir()
                .map_err(|e| {
                    ToolError::new(
                        ErrorCode::Io,
                        format!("cannot make the command's temporary folder: {e}"),
                    )
                })?,
        ),
        None => None,
    };
    let mut command = match (sandbox, &private_tmp) {
        (Some(sandbox), Some(tmp)) => {
            let roots: Vec<std::path::PathBuf> = ctx
                .workspace
                .roots()
                .iter()
                .map(|r| r.path.clone())
                .collect();
            let policy = serde_json::to_string(&sandbox.policy(&roots, tmp.path()))
                .map_err(|e| ToolError::new(ErrorCode::Io, e.to_string()))?;
            let mut command = tokio::process::Command::new(&sandbox.helper);
            command
                .arg(sandbox::EXEC_SUBCOMMAND)
                .arg("--policy-json")
                .arg(policy)
                .arg("--")
                .args(["sh", "-c"])
                .arg(&args.command)
                .env_clear()
                .envs(sandbox.environment(std::env::vars_os()))
                .env("TMPDIR", tmp.path());
            command
        }
        _ => {
            let mut command = tokio::process::Command::new("sh");
            command.arg("-c").arg(&args.command);
            command
        }
    };
    let mut child = command
        .current_dir(&cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::new(ErrorCode::Io, format!("cannot start sh: {e}")))?;
    let pid = child.id();
    // Tells the readers to stop waiting for the end of their pipe: a process outside the group
    // (or one that survived the kill) may hold it open for ever.
    let stop_reading = CancellationToken::new();
    let out_task = tokio::spawn(capture(
        child.stdout.take(),
        stream_budget,
        stop_reading.clone(),
    ));
    let err_task = tokio::spawn(capture(
        child.stderr.take(),
        stream_budget,
        stop_reading.clone(),
    ));

    // The command is over when `sh` has exited *and* both pipes are closed: a background child
    // (`sleep 15 & echo started`) keeps the pipes open after `sh` is gone, and the timeout and
    // Stop must cut that wait short too.
    let finished = async { tokio::join!(child.wait(), out_task, err_task) };
    tokio::pin!(finished);
    let ending = tokio::select! {
        done = &mut finished => Some(done),
        _ = tokio::time::sleep(timeout) => None,
        _ = cancel.cancelled() => None,
    };
    let outcome = match &ending {
        Some(_) => Outcome::Exited,
        None if cancel.is_cancelled() => Outcome::Stopped,
        None => Outcome::TimedOut,
    };
    let (status, stdout, stderr) = match ending {
        Some(done) => done,
        None => {
            kill_group(pid);
            stop_reading.cancel();
            // The group is dead and the readers drain what is buffered within a bounded time,
            // so this ends promptly even when an escaped process still holds a pipe.
            finished.await
        }
    };
    let (stdout, stdout_bytes) = stdout.unwrap_or_default();
    let (stderr, stderr_bytes) = stderr.unwrap_or_default();
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            return Err(ToolError::new(
                ErrorCode::Io,
                format!("waiting for the command failed: {e}"),
            ));
        }
    };
    if outcome == Outcome::Stopped {
        return Err(ToolError::new(
            ErrorCode::Stopped,
            format!(
                "the command was killed by Stop with everything it started: outcome unknown — inspect \
                 the state before retrying. Output before it was killed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
            ),
        ));
    }
    // A timed-out command reports how `sh` itself ended only if it had exited on its own
    // before the kill (its background children kept the pipes open).
    let (exit_code, signal) = {
        use std::os::unix::process::ExitStatusExt;
        match (outcome, status.signal()) {
            (Outcome::TimedOut, Some(libc::SIGKILL)) => (None, None),
            _ => (status.code(), status.signal()),
        }
    };
    let truncated = stdout_bytes > stdout.len() as u64 || stderr_bytes > stderr.len() as u64;
    if let Some(sandbox) = sandbox
        && exit_code == Some(i32::from(sandbox::EXEC_FAILED))
        && let Some(why) = stderr.strip_prefix(sandbox::EXEC_FAILED_PREFIX)
    {
        return Err(ToolError::new(
            ErrorCode::Io,
            format!(
                "the OS sandbox ({}) could not confine the command, so it did not run: {}",
                sandbox.level.as_str(),
                why.trim()
            ),
        ));
    }
    let mut result = json!({
        "command": args.command,
        "cwd": dir.display,
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": outcome == Outcome::TimedOut,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_bytes": stdout_bytes,
        "stderr_bytes": stderr_bytes,
        "truncated": truncated,
    });
    if let Some(sandbox) = sandbox {
        result["sandbox"] = json!(sandbox.level.as_str());
        let mut lines = sandbox::blocked_lines(&[&stderr, &stdout]);
        if !lines.is_empty() {
            // Fitted to the page: the lines are in the output too.
            let cap = ctx.limits.max_tool_result_bytes;
            loop {
                result["sandbox_blocked"] = json!({"note": sandbox::BLOCKED_NOTE, "lines": lines});
                if result.to_string().len() <= cap || lines.is_empty() {
                    break;
                }
                lines.pop();
            }
        }
    }
    drop(private_tmp);
    Ok(result)
}

/// The working directory to start the command in: the folder the walk opened, named by its
/// descriptor (`/proc/self/fd/N`), so the child's `chdir` lands in that very folder whatever
/// was renamed meanwhile (the descriptor is inherited across the fork and closed only at exec).
/// That beats `fchdir` in `pre_exec`, which needs `unsafe` and gives up the spawn fast path.
/// The descriptor's path is checked to lie in a root first: a folder moved out of the
/// workspace after it was opened is refused.
fn confined_cwd(
    workspace: &crate::workspace::Workspace,
    dir: std::os::fd::BorrowedFd,
    display: &str,
) -> Result<std::path::PathBuf, ToolError> {
    use std::os::fd::AsRawFd;
    let cwd = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let lands = std::fs::read_link(&cwd).map_err(|e| {
        ToolError::new(
            ErrorCode::Io,
            format!(
                "cannot confine the command to {}: {e} (pen_command needs /proc)",
                shown(display)
            ),
        )
    })?;
    if !workspace.roots().iter().any(|r| lands.starts_with(&r.path)) {
        return Err(ToolError::new(
            ErrorCode::OutsideWorkspace,
            format!(
                "{} was moved outside the workspace while it was opened",
                shown(display)
            ),
        ));
    }
    Ok(cwd)
}

/// Kills the command's whole process group.
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a negative pid signals the process group `pid` leads; the
        // group was created for this command alone (`process_group(0)`).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// Reads a stream to its end, keeping its head and tail within `budget` escaped bytes (as
/// lossy UTF-8), and counting every byte. Once `stop` fires it reads only what arrives within
/// [`COMMAND_DRAIN_TIMEOUT`], so it always returns soon after the command is killed.
async fn capture<R: AsyncRead + Unpin>(
    stream: Option<R>,
    budget: usize,
    stop: CancellationToken,
) -> (String, u64) {
    let Some(mut stream) = stream else {
        return (String::new(), 0);
    };
    // Raw bytes kept: the head, and a rolling tail of the same size.
    let half = budget / 2;
    let mut head: Vec<u8> = Vec::new();
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut total = 0u64;
    let mut buf = [0u8; COMMAND_READ_CHUNK_BYTES];
    let mut drain_deadline = None;
    loop {
        // `read` is cancel-safe: a read abandoned for the stop signal loses no bytes.
        let read = match drain_deadline {
            None => tokio::select! {
                read = stream.read(&mut buf) => read,
                _ = stop.cancelled() => {
                    drain_deadline = Some(tokio::time::Instant::now() + COMMAND_DRAIN_TIMEOUT);
                    continue;
                }
            },
            Some(deadline) => {
                match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                    Ok(read) => read,
                    Err(_) => break,
                }
            }
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += n as u64;
        for &byte in &buf[..n] {
            if head.len() < half {
                head.push(byte);
            } else {
                tail.push_back(byte);
                if tail.len() > half {
                    tail.pop_front();
                }
            }
        }
    }
    let head_text = String::from_utf8_lossy(&head).into_owned();
    let tail_bytes: Vec<u8> = tail.into_iter().collect();
    let tail_text = String::from_utf8_lossy(&tail_bytes).into_owned();
    if total as usize <= head.len() + tail_bytes.len() {
        let whole = format!("{head_text}{tail_text}");
        if escaped_len(&whole) <= budget {
            return (whole, total);
        }
    }
    // Cut both ends to the escaped budget, with a note of what is missing between them.
    let note = format!(
        "\n…[{} bytes not shown]…\n",
        total.saturating_sub((head.len() + tail_bytes.len()) as u64)
    );
    let room = budget.saturating_sub(escaped_len(&note)) / 2;
    let (head_end, _) = fitting_prefix(&head_text, room);
    let tail_start = suffix_start(&tail_text, room);
    (
        format!(
            "{}{note}{}",
            &head_text[..head_end],
            &tail_text[tail_start..]
        ),
        total,
    )
}

/// The start of the longest suffix of `text` whose escaped length fits `budget`.
fn suffix_start(text: &str, budget: usize) -> usize {
    let mut used = 0;
    let mut start = text.len();
    for (index, c) in text.char_indices().rev() {
        let cost = budget::escaped_char_len(c);
        if used + cost > budget {
            break;
        }
        used += cost;
        start = index;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::workspace::Workspace;

    async fn run_in(
        dir: &std::path::Path,
        args: Value,
        cancel: &CancellationToken,
        cap: u64,
    ) -> Result<Value, ToolError> {
        let workspace = Workspace::new(&[dir.to_path_buf()]).unwrap();
        let limits = Limits::with_max_tool_result_bytes(cap).unwrap();
        let ctx = ToolContext::plain(&workspace, &limits);
        run(serde_json::from_value(args).unwrap(), &ctx, cancel).await
    }

    #[tokio::test]
    async fn exit_code_and_output() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_in(
            dir.path(),
            json!({"command": "echo out; echo err >&2; exit 3"}),
            &CancellationToken::new(),
            65_536,
        )
        .await
        .unwrap();
        assert_eq!(result["exit_code"], 3);
        assert_eq!(result["stdout"], "out\n");
        assert_eq!(result["stderr"], "err\n");
        assert_eq!(result["truncated"], false);
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail_within_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_in(
            dir.path(),
            json!({"command": "seq 1 100000"}),
            &CancellationToken::new(),
            4_096,
        )
        .await
        .unwrap();
        let out = result["stdout"].as_str().unwrap();
        assert!(out.starts_with("1\n2\n3\n"), "{out}");
        assert!(out.ends_with("99999\n100000\n"), "{out}");
        assert!(out.contains("bytes not shown"));
        assert_eq!(result["truncated"], true);
        assert_eq!(result["stdout_bytes"], 588_895);
        assert!(result.to_string().len() <= 4_096);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        // The background child would keep the pipe open if only `sh` were killed.
        let result = run_in(
            dir.path(),
            json!({"command": "sleep 600 & echo started; wait", "timeout_secs": 1}),
            &CancellationToken::new(),
            65_536,
        )
        .await
        .unwrap();
        assert_eq!(result["timed_out"], true);
        assert_eq!(result["stdout"], "started\n");
    }

    #[tokio::test]
    async fn stop_kills_it_and_says_the_outcome_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("started");
        let cancel = CancellationToken::new();
        let stopper = cancel.clone();
        let watched = marker.clone();
        let command = format!("touch {}; sleep 600", marker.display());
        let stop = async move {
            // Stop once the command has visibly started (its marker file exists).
            while !watched.exists() {
                tokio::task::yield_now().await;
            }
            stopper.cancel();
        };
        let (result, ()) = tokio::join!(
            run_in(dir.path(), json!({"command": command}), &cancel, 65_536),
            stop
        );
        let err = result.unwrap_err();
        assert_eq!(err.code, ErrorCode::Stopped);
        assert!(
            err.message.contains("inspect the state before retrying"),
            "{}",
            err.message
        );
    }

    /// `sh` exits at once but its background child keeps both pipes open: the timeout must
    /// still end the command, kill the child and keep what was printed.
    #[tokio::test]
    async fn a_timeout_ends_a_command_whose_background_child_holds_the_pipes() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_in(
            dir.path(),
            json!({"command": "sleep 30 & echo started", "timeout_secs": 1}),
            &CancellationToken::new(),
            65_536,
        )
        .await
        .unwrap();
        assert_eq!(result["timed_out"], true, "{result}");
        assert_eq!(result["stdout"], "started\n", "{result}");
        // `sh` itself had exited on its own, and says so.
        assert_eq!(result["exit_code"], 0, "{result}");
    }

    /// The same with Stop: the wait on the pipes ends, the error says the outcome is unknown
    /// and carries the output read so far.
    #[tokio::test]
    async fn stop_ends_a_command_whose_background_child_holds_the_pipes() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("printed");
        let cancel = CancellationToken::new();
        let stopper = cancel.clone();
        let watched = marker.clone();
        // The marker is made after the echo, so the output is in the pipe when Stop comes.
        let command = format!("sleep 30 & echo started; touch {}", marker.display());
        let stop = async move {
            while !watched.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stopper.cancel();
        };
        let (result, ()) = tokio::join!(
            run_in(dir.path(), json!({"command": command}), &cancel, 65_536),
            stop
        );
        let err = result.unwrap_err();
        assert_eq!(err.code, ErrorCode::Stopped);
        assert!(err.message.contains("outcome unknown"), "{}", err.message);
        assert!(err.message.contains("started"), "{}", err.message);
    }

    /// A process that left the group (`setsid`) survives the kill and holds the pipe: the
    /// readers stop after the bounded drain instead of waiting for it.
    #[tokio::test]
    async fn a_process_that_escaped_the_group_does_not_hold_the_result() {
        let dir = tempfile::tempdir().unwrap();
        let result = run_in(
            dir.path(),
            json!({"command": "setsid sleep 5 & echo started; wait", "timeout_secs": 1}),
            &CancellationToken::new(),
            65_536,
        )
        .await
        .unwrap();
        assert_eq!(result["timed_out"], true, "{result}");
        assert_eq!(result["stdout"], "started\n", "{result}");
    }
}
