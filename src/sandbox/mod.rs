//! pen_command's OS sandbox (Linux): what a command may write, whether it reaches the network,
//! and the hidden sub-command that confines it.
//!
//! The daemon is never confined. A sandboxed command is started as
//! `pen __sandbox-exec --policy-json POLICY -- sh -c COMMAND`: that fresh, single-threaded
//! process confines itself (a user + mount namespace whose read-only bind mounts keep
//! `.git/hooks`, `.git/config` and pen's data folder read-only inside a writable root; a
//! network namespace with its own loopback only; no capabilities and `PR_SET_NO_NEW_PRIVS`;
//! Landlock: read everywhere, write only in the writable roots, the private temporary folder
//! and the device files a shell needs) and then `exec`s the shell, so every child inherits it.
//! Nothing is done between `fork` and `exec` of the multi-threaded daemon.
//!
//! Whether the kernel can do it is probed once per process by running the helper for real
//! ([`support`]); where it cannot, commands run unconfined and ask the owner every time.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
mod exec;

/// The hidden sub-command of `pen` that confines itself and execs the command.
pub const EXEC_SUBCOMMAND: &str = "__sandbox-exec";

/// Test-only: when set (to anything but empty), the probe reports the sandbox unsupported, so
/// the fallback (every command asks, runs unconfined) can be tested on a kernel that has it.
pub const UNSUPPORTED_ENV: &str = "PEN_SANDBOX_TEST_UNSUPPORTED";

/// The first line the helper prints, on stderr, when it cannot confine a command (which then
/// does not run); its exit code is [`EXEC_FAILED`].
pub const EXEC_FAILED_PREFIX: &str = "pen sandbox: ";

/// The helper's exit code when it could not confine the command.
pub const EXEC_FAILED: u8 = 125;

/// The `sandbox` config key: what a command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Writes in the workspace roots, `sandbox_writable_roots` and the private temporary folder.
    WorkspaceWrite,
    /// Writes in the private temporary folder only.
    ReadOnly,
    /// No sandbox: today's `sh -c` with the owner's rights.
    Off,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::WorkspaceWrite, Level::ReadOnly, Level::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::WorkspaceWrite => "workspace-write",
            Level::ReadOnly => "read-only",
            Level::Off => "off",
        }
    }

    pub fn from_name(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|level| level.as_str() == name)
    }
}

/// The `sandbox_env` config key: which of the owner's environment variables a sandboxed
/// command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvPolicy {
    /// Every variable pen has (API keys included), as without a sandbox.
    All,
    /// Only [`CORE_ENV`] and the `LC_*` variables (and `TMPDIR`, the private folder).
    Core,
}

impl EnvPolicy {
    pub const ALL: [EnvPolicy; 2] = [EnvPolicy::All, EnvPolicy::Core];

    pub fn as_str(self) -> &'static str {
        match self {
            EnvPolicy::All => "all",
            EnvPolicy::Core => "core",
        }
    }

    pub fn from_name(name: &str) -> Option<EnvPolicy> {
        EnvPolicy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == name)
    }
}

/// The variables `sandbox_env = "core"` passes (with every `LC_*`).
pub const CORE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ",
];

/// The device files a shell and its tools write to, writable in every level.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// How a call of a tool will run, for the approval rules (the modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// The call starts no process of pen's (every tool but pen_command; MCP tools run in
    /// their servers).
    NotApplicable,
    /// In the OS sandbox.
    Confined,
    /// Unconfined: `sandbox` is `"off"`.
    SandboxOff,
    /// Unconfined: the sandbox is on but the kernel cannot do it (then every command asks).
    Unsupported,
    /// Unconfined because the call asks for it (`"sandbox": "off"`): always asks the owner.
    LeavesSandbox,
}

/// The sandbox a front end's commands run in: the config's choice, with the probe's verdict.
#[derive(Debug, Clone)]
pub struct CommandSandbox {
    pub level: Level,
    pub network: bool,
    /// `sandbox_writable_roots`, `~` expanded.
    pub writable_roots: Vec<PathBuf>,
    pub env: EnvPolicy,
    /// pen's data folder (sessions, checkpoints): kept read-only inside a writable root.
    pub data_dir: Option<PathBuf>,
    /// The program that applies the sandbox: pen itself.
    pub helper: PathBuf,
    /// `Err(why)` when the kernel cannot sandbox (only probed when `level` is not `Off`).
    pub support: Result<(), String>,
}

impl CommandSandbox {
    /// No sandbox: every command runs as `sh -c` (tests, `pen tool`).
    pub fn off() -> CommandSandbox {
        CommandSandbox {
            level: Level::Off,
            network: true,
            writable_roots: Vec::new(),
            env: EnvPolicy::All,
            data_dir: None,
            helper: PathBuf::new(),
            support: Ok(()),
        }
    }

    /// The sandbox of `level` (the config's keys), run by pen itself and probed (once per
    /// process) when it is on: blocks for the probe's few milliseconds the first time.
    pub fn new(
        level: Level,
        network: bool,
        writable_roots: &[String],
        env: EnvPolicy,
        data_dir: Option<PathBuf>,
    ) -> CommandSandbox {
        if level == Level::Off {
            return CommandSandbox::off();
        }
        let helper = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("pen"));
        CommandSandbox {
            level,
            network,
            writable_roots: writable_roots
                .iter()
                .map(|root| expand_home(root))
                .collect(),
            env,
            data_dir,
            support: support(&helper),
            helper,
        }
    }

    /// The notice that the sandbox is on but unavailable, the first time this process asks;
    /// `None` after, or when it is off or available.
    pub fn unsupported_notice_once(&self) -> Option<String> {
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let Err(why) = &self.support else {
            return None;
        };
        if self.level == Level::Off || TOLD.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        Some(unsupported_notice(why))
    }

    /// What `pen/getConfig` shows as `effective_sandbox`: the level, whether commands are
    /// confined on this kernel, and why not when it is on but cannot be.
    pub fn effective(&self) -> Value {
        let mut shown = serde_json::json!({
            "level": self.level.as_str(),
            "confined": self.level != Level::Off && self.support.is_ok(),
        });
        if self.level != Level::Off
            && let Err(why) = &self.support
        {
            shown["unavailable"] = Value::String(why.clone());
        }
        shown
    }

    /// How a pen_command call with `arguments` runs.
    pub fn confinement(&self, arguments: &Value) -> Confinement {
        if self.level == Level::Off {
            return Confinement::SandboxOff;
        }
        if arguments.get("sandbox").and_then(Value::as_str) == Some("off") {
            return Confinement::LeavesSandbox;
        }
        match self.support {
            Ok(()) => Confinement::Confined,
            Err(_) => Confinement::Unsupported,
        }
    }

    /// The policy of one command over the workspace `roots`, with its private folder `tmp`.
    pub fn policy(&self, roots: &[PathBuf], tmp: &Path) -> Policy {
        Policy::build(
            self.level,
            roots,
            &self.writable_roots,
            tmp,
            self.data_dir.as_deref(),
            self.network,
        )
    }

    /// The environment a sandboxed command gets from `vars` (pen's), `TMPDIR` aside.
    pub fn environment(
        &self,
        vars: impl Iterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.filter(|(name, _)| match self.env {
            EnvPolicy::All => true,
            EnvPolicy::Core => name
                .to_str()
                .is_some_and(|name| CORE_ENV.contains(&name) || name.starts_with("LC_")),
        })
        .filter(|(name, _)| name != "TMPDIR")
        .collect()
    }
}

/// `~` or `~/x` with the home folder; any other path as it is.
pub fn expand_home(path: &str) -> PathBuf {
    let home = || dirs::home_dir().unwrap_or_else(|| PathBuf::from("/"));
    match path.strip_prefix('~') {
        Some("") => home(),
        Some(rest) if rest.starts_with('/') => home().join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    }
}

/// What the helper applies to itself before it execs the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Where the command may write (besides the device files).
    pub writable: Vec<PathBuf>,
    /// Paths inside `writable` made read-only by a bind mount (a missing `.git/hooks` of a
    /// repository is created first, so it cannot be created later with a hook in it).
    pub read_only: Vec<PathBuf>,
    /// Whether the command keeps the host's network.
    pub network: bool,
}

impl Policy {
    /// The policy of `level` over `roots` and the `extra` writable roots, with the private
    /// folder `tmp`; `data_dir` (pen's) stays read-only where a writable root holds it.
    pub fn build(
        level: Level,
        roots: &[PathBuf],
        extra: &[PathBuf],
        tmp: &Path,
        data_dir: Option<&Path>,
        network: bool,
    ) -> Policy {
        let mut writable: Vec<PathBuf> = match level {
            Level::WorkspaceWrite => roots.iter().chain(extra).cloned().collect(),
            Level::ReadOnly | Level::Off => Vec::new(),
        };
        let mut read_only = Vec::new();
        for root in &writable {
            let git = root.join(".git");
            if git.is_dir() {
                read_only.push(git.join("hooks"));
                if git.join("config").exists() {
                    read_only.push(git.join("config"));
                }
            }
        }
        if let Some(data) = data_dir
            && data.exists()
            && writable.iter().any(|root| data.starts_with(root))
        {
            read_only.push(data.to_path_buf());
        }
        writable.push(tmp.to_path_buf());
        Policy {
            writable,
            read_only,
            network,
        }
    }
}

/// Whether the kernel can sandbox a command, probed once per process: the helper is run for
/// real on a trivial command under a read-only policy. `Err(why)` when it cannot.
pub fn support(helper: &Path) -> Result<(), String> {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| probe(helper)).clone()
}

fn probe(helper: &Path) -> Result<(), String> {
    if std::env::var_os(UNSUPPORTED_ENV).is_some_and(|v| !v.is_empty()) {
        return Err(format!("{UNSUPPORTED_ENV} is set (a test setting)"));
    }
    if !cfg!(target_os = "linux") {
        return Err("pen's sandbox needs Linux (Landlock and namespaces)".to_string());
    }
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    let policy = Policy::build(Level::ReadOnly, &[], &[], tmp.path(), None, false);
    let json = serde_json::to_string(&policy).map_err(|e| e.to_string())?;
    let output = std::process::Command::new(helper)
        .arg(EXEC_SUBCOMMAND)
        .arg("--policy-json")
        .arg(json)
        .arg("--")
        .args(["sh", "-c", ":"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", helper.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said = said.trim();
    Err(said
        .strip_prefix(EXEC_FAILED_PREFIX)
        .unwrap_or(said)
        .to_string())
}

/// The sentence said once when the sandbox is on but the kernel cannot do it.
pub fn unsupported_notice(why: &str) -> String {
    format!(
        "the OS sandbox for commands is unavailable here ({why}): every command runs unconfined \
         and asks the owner first"
    )
}

/// `pen __sandbox-exec --policy-json POLICY -- PROGRAM ARGS…`: confines this process and
/// execs PROGRAM; on failure prints why (prefixed [`EXEC_FAILED_PREFIX`]) and exits
/// [`EXEC_FAILED`] without running it.
pub fn exec_main(args: &[OsString]) -> std::process::ExitCode {
    let fail = |why: String| {
        eprintln!("{EXEC_FAILED_PREFIX}{why}; the command did not run");
        std::process::ExitCode::from(EXEC_FAILED)
    };
    let (policy, program) = match parse_exec_args(args) {
        Ok(parsed) => parsed,
        Err(why) => return fail(why),
    };
    #[cfg(target_os = "linux")]
    {
        match exec::confine_and_exec(&policy, program) {
            Ok(never) => match never {},
            Err(why) => fail(why),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (policy, program);
        fail("pen's sandbox needs Linux".to_string())
    }
}

fn parse_exec_args(args: &[OsString]) -> Result<(Policy, &[OsString]), String> {
    let usage = "usage: pen __sandbox-exec --policy-json POLICY -- PROGRAM [ARGS…]";
    match args {
        [flag, json, dashes, program @ ..]
            if flag == "--policy-json" && dashes == "--" && !program.is_empty() =>
        {
            let json = json.to_str().ok_or("the policy is not UTF-8")?;
            let policy = serde_json::from_str(json).map_err(|e| format!("bad policy: {e}"))?;
            Ok((policy, program))
        }
        _ => Err(usage.to_string()),
    }
}

/// The lines of a sandboxed command's output that look like the sandbox refused something: a
/// write (`Permission denied`, `Read-only file system`, `Operation not permitted`) or the
/// network (`Network is unreachable`, `Connection refused`, a name that does not resolve).
/// Inferred from the text, so a command's own such errors are listed too.
pub fn blocked_lines(outputs: &[&str]) -> Vec<String> {
    use crate::limits::{SANDBOX_BLOCKED_LINE_BYTES, SANDBOX_BLOCKED_LINES};
    const SIGNS: &[&str] = &[
        "permission denied",
        "read-only file system",
        "operation not permitted",
        "network is unreachable",
        "connection refused",
        "failed to connect",
        "couldn't connect",
        "could not resolve",
        "temporary failure in name resolution",
        "eacces",
        "erofs",
        "enetunreach",
        "econnrefused",
    ];
    let mut lines: Vec<String> = Vec::new();
    for line in outputs.iter().flat_map(|text| text.lines()) {
        let lower = line.to_ascii_lowercase();
        if !SIGNS.iter().any(|sign| lower.contains(sign)) {
            continue;
        }
        let line =
            crate::text::cut_with_note(line.trim(), SANDBOX_BLOCKED_LINE_BYTES, format_args!("…"))
                .into_owned();
        if !lines.contains(&line) {
            lines.push(line);
        }
        if lines.len() == SANDBOX_BLOCKED_LINES {
            break;
        }
    }
    lines
}

/// What a result says when some of its lines look blocked by the sandbox.
pub const BLOCKED_NOTE: &str = "These lines look like the OS sandbox refused a write outside the \
     writable folders or a network connection (inferred from the output). If the command needs \
     it, repeat the call with \"sandbox\": \"off\" and a \"reason\": the owner is asked.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_write_writes_in_the_roots_and_keeps_git_and_pen_s_data_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let data = root.join("pen-data");
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let plain = dir.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        let extra = dir.path().join("extra");
        let tmp = dir.path().join("tmp");
        let policy = Policy::build(
            Level::WorkspaceWrite,
            &[root.clone(), plain.clone()],
            std::slice::from_ref(&extra),
            &tmp,
            Some(&data),
            false,
        );
        assert_eq!(policy.writable, [root.clone(), plain, extra, tmp.clone()]);
        assert_eq!(
            policy.read_only,
            [root.join(".git/hooks"), root.join(".git/config"), data]
        );
        assert!(!policy.network);
        // A repository without hooks still has them protected (the helper makes the folder).
        std::fs::remove_dir(root.join(".git/hooks")).unwrap();
        let policy = Policy::build(
            Level::WorkspaceWrite,
            std::slice::from_ref(&root),
            &[],
            &tmp,
            None,
            true,
        );
        assert_eq!(
            policy.read_only,
            [root.join(".git/hooks"), root.join(".git/config")]
        );
        assert!(policy.network);
    }

    #[test]
    fn read_only_writes_only_in_the_private_folder() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let policy = Policy::build(
            Level::ReadOnly,
            &[dir.path().to_path_buf()],
            &[dir.path().join("extra")],
            &tmp,
            Some(&data),
            false,
        );
        assert_eq!(policy.writable, [tmp]);
        assert!(policy.read_only.is_empty(), "{policy:?}");
    }

    #[test]
    fn a_call_leaves_the_sandbox_only_by_asking_and_only_when_it_is_on() {
        let mut sandbox = CommandSandbox::off();
        let off = serde_json::json!({"command": "ls", "sandbox": "off"});
        let plain = serde_json::json!({"command": "ls"});
        assert_eq!(sandbox.confinement(&plain), Confinement::SandboxOff);
        assert_eq!(sandbox.confinement(&off), Confinement::SandboxOff);
        sandbox.level = Level::WorkspaceWrite;
        assert_eq!(sandbox.confinement(&plain), Confinement::Confined);
        assert_eq!(sandbox.confinement(&off), Confinement::LeavesSandbox);
        sandbox.support = Err("no".into());
        assert_eq!(sandbox.confinement(&plain), Confinement::Unsupported);
        assert_eq!(sandbox.confinement(&off), Confinement::LeavesSandbox);
    }

    #[test]
    fn core_environment_keeps_only_the_core_variables() {
        let mut sandbox = CommandSandbox::off();
        let vars = || {
            [
                ("PATH", "/bin"),
                ("LC_ALL", "C"),
                ("OPENAI_API_KEY", "sk"),
                ("TMPDIR", "/tmp"),
            ]
            .into_iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
        };
        let names = |sandbox: &CommandSandbox| -> Vec<String> {
            sandbox
                .environment(vars())
                .into_iter()
                .map(|(n, _)| n.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&sandbox), ["PATH", "LC_ALL", "OPENAI_API_KEY"]);
        sandbox.env = EnvPolicy::Core;
        assert_eq!(names(&sandbox), ["PATH", "LC_ALL"]);
    }

    #[test]
    fn blocked_lines_are_the_refusals_each_once_and_bounded() {
        let err = "sh: 1: cannot create /etc/x: Permission denied\nok\n\
                   sh: 1: cannot create /etc/x: Permission denied\n\
                   curl: (7) Failed to connect to 127.0.0.1 port 80: Connection refused\n";
        assert_eq!(
            blocked_lines(&["fine\n", err]),
            [
                "sh: 1: cannot create /etc/x: Permission denied",
                "curl: (7) Failed to connect to 127.0.0.1 port 80: Connection refused"
            ]
        );
        assert!(blocked_lines(&["all good\n"]).is_empty());
        let many: String = (0..100)
            .map(|i| format!("{i}: Permission denied\n"))
            .collect();
        assert_eq!(
            blocked_lines(&[&many]).len(),
            crate::limits::SANDBOX_BLOCKED_LINES
        );
    }

    #[test]
    fn home_is_expanded() {
        let home = dirs::home_dir().unwrap_or_else(|| PathBuf::from("/"));
        assert_eq!(expand_home("~"), home);
        assert_eq!(expand_home("~/x"), home.join("x"));
        assert_eq!(expand_home("/a/~"), PathBuf::from("/a/~"));
    }

    #[test]
    fn exec_arguments_are_a_policy_then_the_program() {
        let policy = Policy::build(Level::ReadOnly, &[], &[], Path::new("/t"), None, false);
        let json = serde_json::to_string(&policy).unwrap();
        let args: Vec<OsString> = ["--policy-json", &json, "--", "sh", "-c", "x"]
            .into_iter()
            .map(OsString::from)
            .collect();
        let (parsed, program) = parse_exec_args(&args).unwrap();
        assert_eq!(parsed, policy);
        assert_eq!(program, &args[3..]);
        assert!(parse_exec_args(&args[..3]).is_err());
        assert!(parse_exec_args(&[]).is_err());
    }
}
