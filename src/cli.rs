//! The command line: `pen tool` calls one native tool with no model and prints the exact
//! observation the model would receive; `pen run` runs one turn; the management commands
//! (`pen sessions`, `pen revert`, `pen fork`, `pen mcp`) print for a person on a terminal and
//! JSON lines otherwise. What the terminal shows is built in [`terminal`].

pub mod human;
pub mod terminal;

use crate::config::{self, Config};
use crate::limits::{
    EXPORT_PAGE_ROWS, MAX_FOCUS_RANGES, MAX_STDIN_PROMPT_BYTES, MAX_TOOL_RESULT_BYTES,
};
use crate::protocol;
use crate::server::{self, ServeOptions};
use crate::session::{self, SessionStore};
use crate::tools::{self, ToolContext};
use crate::workspace::Workspace;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Parser)]
#[command(
    name = "pen",
    version,
    about = "A coding-agent daemon with bounded native tools"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Call one native tool with no model; print the result object the model would see.
    Tool(ToolCommand),
    /// Run the daemon on stdio (the LSP base protocol); editors start this.
    Serve,
    /// Run as an Agent Client Protocol (v1) agent on stdio, for Zed, JetBrains and the ACP
    /// clients of Neovim and Emacs; the workspace is each session's cwd.
    Acp,
    /// Run one agent turn in the current directory: progress to stderr, the answer to stdout.
    /// Exit 0 on end_turn, 1 on error (or max_turn_requests), 130 when stopped (Ctrl-C), 2 on
    /// bad usage.
    Run(RunCommand),
    /// List sessions, newest first: a line each on a terminal; one JSON object a line (as
    /// pen/listSessions shows them) with --json or when stdout is not a terminal.
    Sessions {
        /// Also list sessions with no work in them (a first prompt whose provider failed).
        #[arg(long)]
        all: bool,
        /// JSON lines, also on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// Export a session's transcript, one JSON entry a line, in its stored form (every field pen
    /// recorded; pen/getTranscript's entries are the editors' typed view of the same records).
    Transcript {
        /// The session id (from `pen sessions`).
        session_id: String,
    },
    /// Revert the file changes of a turn and every later one (the last turn when TURN is not
    /// given), in the current directory's workspace; prints what it did file by file on a
    /// terminal, else (or with --json) the result as pen/revertTurn answers it. Exit 0 when every
    /// file was reverted, 1 on an error, 2 when a file is in conflict or not revertible.
    Revert {
        /// The session id (from `pen sessions`).
        session_id: String,
        /// The turn id (from `pen transcript`); the last turn when absent.
        turn_id: Option<String>,
        /// Also overwrite files that changed after pen wrote them.
        #[arg(long)]
        force: bool,
        /// The JSON result, also on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// Start a new session whose history is SESSION's before TURN; prints its id (JSON with
    /// --json or when stdout is not a terminal).
    Fork {
        /// The session id (from `pen sessions`).
        session_id: String,
        /// The first turn the fork leaves out (from `pen transcript`).
        turn_id: String,
        /// The JSON result, also on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// The MCP servers of the config (and the current folder's `.mcp.json`), for debugging.
    #[command(subcommand)]
    Mcp(McpCommand),
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start every server and print each one's status and tools: a line each on a terminal,
    /// one JSON object a line with --json or when stdout is not a terminal.
    List {
        /// JSON lines, also on a terminal.
        #[arg(long)]
        json: bool,
    },
    /// Call one MCP tool; print the result exactly as the model would see it (capped).
    Call {
        /// The server's name (the NAME of `[mcp_servers.NAME]`).
        server: String,
        /// The tool, by the server's name for it or as `mcp__server__tool`.
        tool: String,
        /// The arguments as a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
    /// Serve pen's native tools to another agent as an MCP server on stdio. By default only
    /// the read-only tools are offered; writes and commands only when the owner allows them.
    Serve(McpServeCommand),
}

#[derive(Debug, clap::Args)]
pub struct McpServeCommand {
    /// A workspace root the tools are confined to (repeatable; default: the current folder).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,
    /// Also offer pen_create and pen_edit; each write is recorded in a session, so `pen revert`
    /// puts it back.
    #[arg(long)]
    pub allow_writes: bool,
    /// Also offer pen_command.
    #[arg(long)]
    pub allow_commands: bool,
}

#[derive(Debug, clap::Args)]
pub struct RunCommand {
    /// The prompt; `-` reads it from stdin, as does no prompt when stdin is not a terminal
    /// (`git diff | pen run`).
    pub prompt: Option<String>,
    /// Resume this session instead of starting a new one.
    #[arg(long)]
    pub session: Option<String>,
    /// Continue this folder's latest session (the one the last `pen run` here ran in).
    #[arg(long = "continue", conflicts_with = "session")]
    pub continue_latest: bool,
    /// Print every event as a JSON line on stdout (and the outcome last).
    #[arg(long)]
    pub json: bool,
    /// openai, anthropic or bedrock (the `provider` config key).
    #[arg(long)]
    pub provider: Option<String>,
    /// The model (the `model` config key).
    #[arg(long)]
    pub model: Option<String>,
    /// The API base URL (the `base_url` config key), e.g. http://127.0.0.1:11434/v1.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Attach a file (or lines L1-L2 of it) to the prompt: `--file src/a.rs:10-40`. Repeatable.
    #[arg(long = "file", value_name = "PATH[:L1-L2]")]
    pub files: Vec<String>,
    /// The permission mode (the `mode` config key): plan, ask, edit or auto.
    #[arg(long)]
    pub mode: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ToolCommand {
    /// The tool to call, e.g. pen_read.
    #[arg(required_unless_present = "list")]
    pub name: Option<String>,
    /// The tool's arguments as a JSON object.
    #[arg(default_value = "{}")]
    pub arguments: String,
    /// The workspace root the tool is confined to.
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// The cap on the serialized result (max_tool_result_bytes).
    #[arg(long, value_parser = parse_max_result_bytes)]
    pub max_result_bytes: Option<u64>,
    /// Print the tool catalog (names, descriptions, argument schemas) as JSON.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
    /// Pretty-print the JSON (the default when stdout is a terminal).
    #[arg(long, conflicts_with = "compact")]
    pub pretty: bool,
    /// Print the exact one-line observation the model receives (the default when stdout is
    /// not a terminal, so scripts see the model's bytes).
    #[arg(long)]
    pub compact: bool,
}

impl ToolCommand {
    /// Whether to pretty-print: asked for, or by default on a terminal.
    fn pretty(&self) -> bool {
        use std::io::IsTerminal;
        self.pretty || (!self.compact && std::io::stdout().is_terminal())
    }
}

/// The exit status of a command whose stdout was closed under it (`pen … | head -1`): 141,
/// what a shell reports for a process ended by SIGPIPE, so a pipeline sees the same status it
/// would from any other tool there. pen ends quietly: no panic, no message.
pub const EXIT_STDOUT_CLOSED: u8 = 141;

/// Writes `text` and a newline to stdout and flushes; `false` when stdout is closed (or
/// otherwise failing), which the callers treat as "nobody is reading any more".
fn print_line(text: &str) -> bool {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .is_ok()
}

/// Writes `text` to stdout and flushes; `false` when stdout is closed.
fn print_text(text: &str) -> bool {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// A JSON text as `pen tool` prints it: the exact bytes, or pretty-printed. A text that is not
/// JSON (an observation the cap cut) is printed as it is.
fn shown_json(text: &str, pretty: bool) -> std::borrow::Cow<'_, str> {
    if !pretty {
        return text.into();
    }
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .map_or(text.into(), Into::into)
}

/// Watches stdout for its reader going away while pen is not writing (a turn waiting on the
/// model, say) and calls `on_closed` once. A pipe or socket whose reader is gone polls as
/// `POLLERR`/`POLLHUP`; a terminal, file or `/dev/null` never does, and the watcher just waits
/// with the process.
fn watch_stdout_closed(on_closed: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("pen-stdout-watch".into())
        .spawn(move || {
            loop {
                let mut fd = libc::pollfd {
                    fd: libc::STDOUT_FILENO,
                    events: 0,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, for the duration of the call.
                let ready = unsafe { libc::poll(&mut fd, 1, -1) };
                if ready < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return;
                }
                if fd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                    on_closed();
                    return;
                }
                if fd.revents & libc::POLLNVAL != 0 {
                    return;
                }
            }
        });
    // Without the watcher a closed stdout is still noticed at the next write.
    if let Err(e) = spawned {
        tracing::warn!("cannot watch stdout: {e}");
    }
}

fn parse_max_result_bytes(text: &str) -> Result<u64, String> {
    let value: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number of bytes"))?;
    MAX_TOOL_RESULT_BYTES
        .check(value)
        .map_err(|e| e.to_string())
}

/// Exit status of `pen tool`: 0 for a result, 1 for an error result, 2 for bad usage.
pub fn run_tool(command: ToolCommand) -> ExitCode {
    let pretty = command.pretty();
    let mut config = boot_config();
    if let Some(max) = command.max_result_bytes {
        config.max_tool_result_bytes = max;
    }
    if command.list {
        let catalog = tools::registry::catalog(&crate::agent::catalog_limits(&config));
        let text = match serde_json::to_string(&catalog) {
            Ok(text) => text,
            Err(e) => return usage(&format!("cannot print the catalog: {e}")),
        };
        if !print_line(&shown_json(&text, pretty)) {
            return ExitCode::from(EXIT_STDOUT_CLOSED);
        }
        return ExitCode::SUCCESS;
    }
    let Some(name) = command.name else {
        return usage("name a tool, or pass --list");
    };
    if tools::registry::get(&name).is_none() {
        return usage(&tools::registry::unknown_tool(&name).message);
    }
    let arguments: serde_json::Value = match serde_json::from_str(&command.arguments) {
        Ok(value) => value,
        Err(e) => return usage(&format!("the arguments are not valid JSON: {e}")),
    };
    let workspace = match Workspace::new(std::slice::from_ref(&command.root)) {
        Ok(ws) => ws,
        Err(e) => return usage(&e.to_string()),
    };
    let limits = config.limits();
    let ctx = ToolContext::plain(&workspace, &limits);
    let result = tools::call(&name, &arguments, &ctx);
    if !print_line(&shown_json(&tools::observation(&result, &limits), pretty)) {
        return ExitCode::from(EXIT_STDOUT_CLOSED);
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The config from the config file (`PEN_CONFIG` or the default path) and `PEN_*` variables;
/// refused values are reported on stderr and their defaults kept.
fn boot_config() -> Config {
    let (config, warnings) = Config::load(config::config_file().as_deref(), std::env::vars());
    for warning in warnings {
        eprintln!("pen: {warning}");
    }
    config
}

/// `pen run`: one turn.
pub fn run_turn(command: RunCommand) -> ExitCode {
    let prompt = match prompt_text(command.prompt.as_deref()) {
        Ok(prompt) => prompt,
        Err(message) => return usage(&message),
    };
    let mut config = boot_config();
    for (key, value) in [
        ("provider", &command.provider),
        ("model", &command.model),
        ("base_url", &command.base_url),
        ("mode", &command.mode),
    ] {
        if let Some(value) = value
            && let Err(e) = config.set(key, &serde_json::Value::String(value.clone()))
        {
            return usage(&e.to_string());
        }
    }
    // What touches the disk before the turn (the folder, the session store) is done here,
    // before the runtime starts, so that no call on the runtime blocks.
    let ready = match RunReady::new(&command) {
        Ok(ready) => ready,
        Err(error) => return failed(&error.to_string()),
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        headless(command, prompt, config, ready)
            .await
            .unwrap_or_else(|error| failed(&error.to_string()))
    })
}

/// The prompt of `pen run`: its argument, or stdin's text for `-` or for no argument when stdin
/// is not a terminal (read whole, up to [`MAX_STDIN_PROMPT_BYTES`]); an error says what to do.
fn prompt_text(argument: Option<&str>) -> Result<String, String> {
    use std::io::{IsTerminal, Read};
    let text = match argument {
        Some("-") => None,
        Some(prompt) => Some(prompt.to_string()),
        None if std::io::stdin().is_terminal() => {
            return Err(
                "give the prompt: pen run \"…\" (or pipe it in: pen run - < prompt.txt)".into(),
            );
        }
        None => None,
    };
    let text = match text {
        Some(text) => text,
        None => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .lock()
                .take(MAX_STDIN_PROMPT_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("cannot read the prompt from stdin: {e}"))?;
            if bytes.len() > MAX_STDIN_PROMPT_BYTES {
                return Err(format!(
                    "the prompt on stdin is over {MAX_STDIN_PROMPT_BYTES} bytes; attach large \
                     files with --file instead"
                ));
            }
            String::from_utf8(bytes).map_err(|_| "the prompt on stdin is not UTF-8 text")?
        }
    };
    if text.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(text)
}

/// Why `pen run` could not run its turn.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// A `--file` argument that is not `PATH` or `PATH:FROM-TO`.
    #[error("{0}")]
    FileArgument(String),
    #[error("at most {MAX_FOCUS_RANGES} --file arguments are taken")]
    TooManyFiles,
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Store(#[from] session::SessionError),
    #[error("{0}")]
    StoreThread(tokio::task::JoinError),
    #[error(transparent)]
    Provider(#[from] crate::providers::choice::ChoiceError),
    /// The session could not be claimed; another turn running in it is said with what to do.
    #[error("{}", begin_message(.0))]
    Begin(crate::agent::BeginError),
    #[error("no earlier `pen run` in {0} to continue; pen run \"…\" starts a session here")]
    NothingToContinue(String),
}

/// Says why `pen run` could not run its turn: exit code 1.
fn failed(message: &str) -> ExitCode {
    eprintln!("pen: {message}");
    ExitCode::from(1)
}

/// What `pen run` reads from the disk before its runtime starts: the attached files' ranges,
/// the folder it works in, and the session store.
struct RunReady {
    focus: crate::agent::Focus,
    root: PathBuf,
    workspace: Workspace,
    data_dir: PathBuf,
    store: Arc<SessionStore>,
    /// The session to continue (`--session`, or the folder's latest for `--continue`).
    continued: Option<String>,
}

impl RunReady {
    /// The attached files are checked first, then the folder and the store are opened: all
    /// before anything is written.
    fn new(command: &RunCommand) -> Result<RunReady, RunError> {
        let focus = focus_of(&command.files)?;
        let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let workspace = Workspace::new(std::slice::from_ref(&root))?;
        let data_dir = session::default_data_dir()?;
        let store = SessionStore::open(&data_dir)?;
        let continued = match (&command.session, command.continue_latest) {
            (Some(id), _) => Some(id.clone()),
            (None, true) => Some(
                session::latest::latest(&data_dir, &root)
                    .ok_or_else(|| RunError::NothingToContinue(root.display().to_string()))?,
            ),
            (None, false) => None,
        };
        Ok(RunReady {
            focus,
            root,
            workspace,
            data_dir,
            store: Arc::new(store),
            continued,
        })
    }
}

/// One headless turn: its exit code, or why it could not run.
async fn headless(
    command: RunCommand,
    prompt: String,
    config: Config,
    ready: RunReady,
) -> Result<ExitCode, RunError> {
    use crate::agent::{Channel, Engine, TurnSetup};
    let RunReady {
        focus,
        root,
        workspace,
        data_dir,
        store,
        continued,
    } = ready;
    let engine = Engine::new(store.clone());
    // No provider, no session: the failure is reported before anything is written.
    engine.provider(&config).await?;
    let session_id = run_session(&store, continued, &prompt, &data_dir, &root).await?;
    let prompt = format!("{prompt}{}", attached(focus, &workspace, &config).await);
    let cancel = stop_on_ctrl_c();
    let style = terminal::Style::for_stderr();
    let live = terminal::Live::for_stderr();
    let shown = Arc::new(Shown::default());
    let (stdout_closed, on_event) = printer(
        command.json,
        cancel.clone(),
        style,
        Arc::clone(&live),
        Arc::clone(&shown),
    );
    // One turn per session across processes: a session a daemon (or another `pen run`) is
    // running a turn in is refused, before anything is written.
    let pending = engine
        .begin(&session_id, cancel.clone())
        .await
        .map_err(RunError::Begin)?;
    announce(&engine, &config, &session_id).await;
    let mcp = crate::mcp::McpManager::new(Some(data_dir));
    let ended = tokio_util::sync::CancellationToken::new();
    if !command.json {
        live.wait("waiting for the model");
        live.run(style, ended.clone());
    }
    let setup = TurnSetup {
        tools: run_tools(workspace, &config).await,
        config,
        mcp: &mcp,
        client_mcp_servers: Default::default(),
        root,
    };
    let approver = TerminalApprover {
        stop: cancel,
        style,
        live: Arc::clone(&live),
        calls_shown: !command.json,
    };
    let channel = Channel::direct(Arc::new(approver), on_event);
    let outcome = pending.run_set_up(&prompt, setup, channel).await;
    ended.cancel();
    live.quiet();
    Ok(run_exit(
        &outcome,
        &RunEnd {
            json: command.json,
            stdout_closed: &stdout_closed,
            session_id: &session_id,
            style,
            live: &live,
            changed_files: shown
                .changed_files
                .load(std::sync::atomic::Ordering::SeqCst),
        },
    ))
}

/// What `pen run`'s printer saw that its last lines need.
#[derive(Default)]
struct Shown {
    /// A call that may change files (one that asks for approval) ran: the last lines say how
    /// to revert the turn.
    changed_files: std::sync::atomic::AtomicBool,
}

/// The lines `pen run` starts with on stderr: the session, then the model, the window it is
/// planned under and where that came from (found once here; the turn reuses the engine's
/// answer).
async fn announce(engine: &crate::agent::Engine, config: &Config, session_id: &str) {
    eprintln!("pen: session {session_id}");
    eprintln!("pen: mode {} ({})", config.mode, config.mode.description());
    if let Ok((target, window)) = engine.window(config).await {
        eprintln!("pen: {}", crate::agent::window_line(&target.model, &window));
    }
}

/// Why `pen run` could not claim its session: a turn running there elsewhere comes with what
/// to do about it.
fn begin_message(err: &crate::agent::BeginError) -> String {
    match err {
        crate::agent::BeginError::Store(e @ session::SessionError::LeaseHeld { .. }) => {
            format!("{e}; wait for that turn to end (or stop it there) and run this again")
        }
        e => e.to_string(),
    }
}

/// `pen run`'s tools: over the current folder, with a read ledger of its own and no editor.
async fn run_tools(workspace: Workspace, config: &Config) -> crate::agent::LocalTools {
    crate::agent::LocalTools {
        sandbox: config
            .command_sandbox_probed(crate::session::default_data_dir().ok())
            .await,
        ..crate::agent::LocalTools::new(workspace, config.limits())
    }
}

/// Runs session store work on a blocking thread, as every store call of a turn is.
async fn store_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, session::SessionError> + Send + 'static,
) -> Result<T, RunError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Ok(done?),
        Err(e) => Err(RunError::StoreThread(e)),
    }
}

/// The files `--file` attaches.
fn focus_of(files: &[String]) -> Result<crate::agent::Focus, RunError> {
    let mut focus = crate::agent::Focus::default();
    for arg in files {
        let file = crate::agent::parse_file_arg(arg).map_err(RunError::FileArgument)?;
        focus.files.push(file);
    }
    if focus.files.len() > MAX_FOCUS_RANGES {
        return Err(RunError::TooManyFiles);
    }
    Ok(focus)
}

/// The session `pen run` continues (`--session`, `--continue`), or a new one named for the
/// prompt; recorded as the folder's latest (what `--continue` takes next time).
async fn run_session(
    store: &Arc<SessionStore>,
    continued: Option<String>,
    prompt: &str,
    data_dir: &std::path::Path,
    root: &std::path::Path,
) -> Result<String, RunError> {
    let store = Arc::clone(store);
    let title: String = prompt.trim().chars().take(80).collect();
    let (data_dir, root) = (data_dir.to_path_buf(), root.to_path_buf());
    store_thread(move || {
        let info = match continued {
            Some(id) => store.get_session(&id),
            None => store.new_session(Some(&title)),
        }?;
        // Without the record only `--continue` is lost; the turn runs.
        if let Err(e) = session::latest::remember(&data_dir, &root, &info.id) {
            tracing::warn!("cannot record the folder's latest session: {e}");
        }
        Ok(info.id)
    })
    .await
}

/// The attached files as the prompt carries them, read on a blocking thread, as every file read
/// of a turn is.
async fn attached(focus: crate::agent::Focus, workspace: &Workspace, config: &Config) -> String {
    let workspace = workspace.clone();
    let limits = config.limits();
    tokio::task::spawn_blocking(move || {
        crate::agent::render_focus(&focus, &workspace, None, &limits)
    })
    .await
    .unwrap_or_default()
}

/// The turn's Stop switch, fired by Ctrl-C.
fn stop_on_ctrl_c() -> tokio_util::sync::CancellationToken {
    let cancel = tokio_util::sync::CancellationToken::new();
    let stopper = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\npen: stopping…");
            stopper.cancel();
        }
    });
    cancel
}

/// What `pen run` shows of a turn's events: the answer's text on stdout (every event as a JSON
/// line with `--json`), its calls and notices on stderr; and whether stdout closed. Nobody reads
/// stdout any more (`pen run … | head -1`): Stop the turn, so what finished is recorded and what
/// did not start is "not executed (stopped)", then exit quietly.
fn printer(
    json: bool,
    cancel: tokio_util::sync::CancellationToken,
    style: terminal::Style,
    live: Arc<terminal::Live>,
    shown: Arc<Shown>,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    impl Fn(crate::agent::AgentEvent) + Send + Sync + 'static,
) {
    use crate::agent::TurnEvent;
    let stdout_closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let close_stdout = {
        let closed = stdout_closed.clone();
        move || {
            closed.store(true, std::sync::atomic::Ordering::SeqCst);
            cancel.cancel();
        }
    };
    watch_stdout_closed(close_stdout.clone());
    let closed = stdout_closed.clone();
    let on_event = move |event: crate::agent::AgentEvent| {
        if closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let written = match (json, &event.event) {
            (true, _) => print_line(
                &serde_json::to_string(&crate::protocol::EventParams::from(event.clone()))
                    .unwrap_or_default(),
            ),
            (false, TurnEvent::TextDelta { text }) => live.text(text),
            _ => true,
        };
        if !written {
            close_stdout();
            return;
        }
        if json {
            return;
        }
        match &event.event {
            TurnEvent::ToolCallStarted {
                tool, arguments, ..
            } => {
                live.print(&format!(
                    "pen: → {} {}",
                    style.bold(tool),
                    arguments.clone().unwrap_or(serde_json::Value::Null)
                ));
                live.wait(&format!("running {tool}"));
            }
            TurnEvent::ApprovalRequested(_) => live.quiet(),
            TurnEvent::ToolCallFinished { tool, outcome, .. } => {
                if *outcome == crate::transcript::CallOutcome::Done
                    && config::APPROVABLE_TOOLS.contains(&tool.as_str())
                {
                    shown
                        .changed_files
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                live.print(&format!("pen: ← {tool} {}", style.outcome(*outcome)));
                live.wait("waiting for the model");
            }
            TurnEvent::ContextTrimmed(trim) => live.print(&format!("pen: {}", trim.notice())),
            TurnEvent::ProviderWarning { message } | TurnEvent::SandboxUnavailable { message } => {
                live.print(&format!("pen: {} {message}", style.yellow("warning:")))
            }
            TurnEvent::Plan { steps } => {
                live.print(&format!("pen: {}", crate::tools::plan::summary(steps)));
                for step in steps {
                    live.print(&format!("pen:   {} {}", step.status.mark(), step.text));
                }
            }
            _ => {}
        }
    };
    (stdout_closed, on_event)
}

/// What `pen run`'s last lines need to know.
struct RunEnd<'a> {
    json: bool,
    stdout_closed: &'a std::sync::atomic::AtomicBool,
    session_id: &'a str,
    style: terminal::Style,
    live: &'a terminal::Live,
    changed_files: bool,
}

/// Says how the turn ended (its outcome as a JSON line with `--json`; its error, its usage and
/// how to continue or undo it on stderr) and gives `pen run`'s exit code.
fn run_exit(outcome: &crate::agent::TurnOutcome, end: &RunEnd<'_>) -> ExitCode {
    use crate::agent::StopReason;
    let RunEnd {
        json,
        stdout_closed,
        session_id,
        style,
        live,
        changed_files,
    } = *end;
    let last = if json {
        serde_json::to_string(&crate::protocol::TurnOutcome::from(outcome.clone()))
            .unwrap_or_default()
    } else {
        String::new()
    };
    if stdout_closed.load(std::sync::atomic::Ordering::SeqCst) || !print_line(&last) {
        return ExitCode::from(EXIT_STDOUT_CLOSED);
    }
    if let Some(error) = &outcome.last_error {
        live.print(&format!("pen: {}", style.red(error)));
    }
    // A turn no request of which reported usage (one that failed at once) says so once.
    match (outcome.usage, outcome.session_usage) {
        (None, None) => live.print("pen: usage: none reported"),
        (turn, session) => {
            for (of, usage) in [("turn", turn), ("session", session)] {
                let shown = usage.map_or_else(|| "none reported".into(), |u| usage_line(&u));
                live.print(&format!("pen: usage this {of}: {shown}"));
            }
        }
    }
    if outcome.stop_reason == StopReason::MaxTurnRequests {
        live.print("pen: the turn reached max_turn_requests");
    }
    if !json {
        live.print(&style.dim(&format!(
            "pen: continue: pen run --continue \"…\"{}",
            if changed_files {
                format!("  ·  undo this turn's changes: pen revert {session_id}")
            } else {
                String::new()
            }
        )));
    }
    match outcome.stop_reason {
        StopReason::EndTurn => ExitCode::SUCCESS,
        StopReason::Cancelled => ExitCode::from(130),
        StopReason::Error | StopReason::MaxTurnRequests => ExitCode::from(1),
    }
}

/// Usage as `pen run` shows it at the end: the input in total, the share of it read from the
/// provider's cache (when the provider reports cache reads), what was written to the cache,
/// and the output.
pub fn usage_line(usage: &crate::providers::Usage) -> String {
    let mut line = format!("{} input tokens", usage.input_tokens);
    if let Some(read) = usage.cache_read_tokens {
        let percent = match usage.input_tokens {
            0 => 0,
            total => (u128::from(read) * 100 / u128::from(total)) as u64,
        };
        line.push_str(&format!(" ({percent}% cached"));
        if let Some(written) = usage.cache_write_tokens.filter(|&w| w > 0) {
            line.push_str(&format!(", {written} written to the cache"));
        }
        line.push(')');
    } else if let Some(written) = usage.cache_write_tokens.filter(|&w| w > 0) {
        line.push_str(&format!(" ({written} written to the cache)"));
    }
    line.push_str(&format!(", {} output tokens", usage.output_tokens));
    if let Some(reasoning) = usage.reasoning_tokens.filter(|&r| r > 0) {
        line.push_str(&format!(" ({reasoning} reasoning)"));
    }
    line
}

/// Approvals for `pen run`: asks on the terminal when there is one; otherwise nobody can be
/// asked, and the call does not run ("approval no longer applies", which names the mode or
/// key that would have run it). Ctrl-C at the prompt is Stop: the wait for the answer ends at
/// once (see [`terminal::read_answer`]).
struct TerminalApprover {
    /// The turn's Stop switch.
    stop: tokio_util::sync::CancellationToken,
    style: terminal::Style,
    live: Arc<terminal::Live>,
    /// Whether the call was just shown (`→ tool {arguments}`), so the prompt need not repeat it.
    calls_shown: bool,
}

/// The answers of `pen run`'s approval prompt.
const APPROVAL_CHOICES: &str = "[y]es / [a]lways this session / [r] no, and tell pen why / [n]o";

impl crate::agent::Approver for TerminalApprover {
    fn ask(
        &self,
        request: crate::agent::ApprovalRequest,
    ) -> futures::future::BoxFuture<'static, crate::agent::ApprovalAnswer> {
        use crate::agent::{ApprovalKind, Decision};
        use std::io::IsTerminal;
        let (stop, style, live) = (self.stop.clone(), self.style, Arc::clone(&self.live));
        let calls_shown = self.calls_shown;
        Box::pin(async move {
            if !std::io::stdin().is_terminal() {
                let why = "pen run has no terminal to ask on";
                match &request.would_allow {
                    Some(hint) => eprintln!("pen: {} was not asked: {why}; {hint}", request.tool),
                    None => eprintln!("pen: {} was not asked: {why}", request.tool),
                }
                return Err(why.into());
            }
            live.quiet();
            if let Some(diff) = &request.diff {
                live.print(&style.diff(diff));
            }
            if let Some(note) = &request.not_revertible {
                live.print(&format!("pen: {}", style.yellow(note)));
            }
            let question = match &request.kind {
                ApprovalKind::StartMcpServer {
                    server,
                    command_line,
                    ..
                } => format!(
                    "pen [mode {}]: start the project's MCP server {} ({command_line})? [y] this \
                     time / [a] always in this folder / [n]o: ",
                    request.mode,
                    style.bold(server)
                ),
                ApprovalKind::ToolCall if calls_shown => format!(
                    "pen [mode {}]: allow {}? {APPROVAL_CHOICES}: ",
                    request.mode,
                    style.bold(&request.tool)
                ),
                ApprovalKind::ToolCall => format!(
                    "pen [mode {}]: allow {} {}? {APPROVAL_CHOICES}: ",
                    request.mode,
                    style.bold(&request.tool),
                    request.arguments
                ),
            };
            eprint!("{question}");
            let Some(line) = terminal::read_answer(stop.clone()).await else {
                // Stop: the turn withdraws the request itself and records the call as not run.
                if stop.is_cancelled() {
                    return std::future::pending().await;
                }
                return Err("the terminal closed".into());
            };
            let tool_call = matches!(request.kind, ApprovalKind::ToolCall);
            let (decision, reason) = match line.trim() {
                "y" | "yes" => (Decision::Allow, None),
                "a" | "always" => (Decision::AllowForSession, None),
                "r" | "reason" if tool_call => {
                    eprint!("pen: why (pen reads it): ");
                    let Some(reason) = terminal::read_answer(stop.clone()).await else {
                        if stop.is_cancelled() {
                            return std::future::pending().await;
                        }
                        return Err("the terminal closed".into());
                    };
                    (Decision::Deny, Some(reason.trim().to_string()))
                }
                _ => (Decision::Deny, None),
            };
            if let ApprovalKind::StartMcpServer { server, .. } = &request.kind {
                live.print(&format!(
                    "pen: {}",
                    match decision {
                        Decision::Allow => format!("{server} starts this time only"),
                        Decision::AllowForSession => format!(
                            "stored: {server} starts without asking in this folder while its \
                             command stays the same"
                        ),
                        Decision::Deny => format!("{server} stays off"),
                    }
                ));
            } else if decision != Decision::Deny {
                live.wait(&format!("running {}", request.tool));
            }
            Ok((decision, reason))
        })
    }
}

/// `pen mcp list`, `pen mcp call` and `pen mcp serve`. Project servers (`.mcp.json`) run only when approved
/// before (by a turn); these commands never ask.
pub fn run_mcp(command: McpCommand) -> ExitCode {
    let config = boot_config();
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    runtime.block_on(async move {
        let manager = crate::mcp::McpManager::new(session::default_data_dir().ok());
        let never = tokio_util::sync::CancellationToken::new();
        // `pen mcp serve` is a server, not a client of the configured servers: none start.
        let servers = || manager.prepare(&config.mcp_servers, &root, None, &never);
        match command {
            McpCommand::Serve(serve) => run_mcp_serve(serve, &config).await,
            McpCommand::List { json } => {
                let mcp = servers().await;
                let style = terminal::Style::for_stdout();
                for status in mcp.status() {
                    let tools = mcp.tool_names(&status.name);
                    if human::for_a_person(json) {
                        if !print_line(&human::mcp_server_line(&status, &tools, style)) {
                            return ExitCode::from(EXIT_STDOUT_CLOSED);
                        }
                        continue;
                    }
                    let left_out: Vec<serde_json::Value> = mcp
                        .left_out(&status.name)
                        .into_iter()
                        .map(|(tool, why)| serde_json::json!({"tool": tool, "why": why}))
                        .collect();
                    let line = serde_json::json!({
                        "server": status.name,
                        "status": status.state.as_str(),
                        "protocolVersion": match &status.state {
                            crate::mcp::ServerState::Running { protocol_version } => Some(protocol_version.as_str()),
                            _ => None,
                        },
                        "reason": status.reason,
                        "project": status.project,
                        "toolCount": status.tool_count,
                        "schemaTokens": status.schema_tokens,
                        "tools": tools,
                        "leftOut": left_out,
                    });
                    if !print_line(&line.to_string()) {
                        return ExitCode::from(EXIT_STDOUT_CLOSED);
                    }
                }
                ExitCode::SUCCESS
            }
            McpCommand::Call {
                server,
                tool,
                arguments,
            } => {
                let arguments: serde_json::Value = match serde_json::from_str(&arguments) {
                    Ok(value) => value,
                    Err(e) => return usage(&format!("the arguments are not valid JSON: {e}")),
                };
                let mcp = servers().await;
                if !mcp.status().iter().any(|s| s.name == server) {
                    return usage(&crate::mcp::McpError::NoServer(server).to_string());
                }
                // The tool by the server's name for it, or by the model's.
                let name = if mcp.tool_names(&server).contains(&tool) {
                    tool
                } else {
                    mcp.model_name(&server, &tool)
                        .unwrap_or_else(|| format!("mcp__{server}__{tool}"))
                };
                let result = mcp
                    .call(&name, arguments, tokio_util::sync::CancellationToken::new())
                    .await;
                let shown = crate::mcp::observation(&result, config.limits().max_tool_result_bytes);
                if !print_line(&shown) {
                    return ExitCode::from(EXIT_STDOUT_CLOSED);
                }
                if result.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
        }
    })
}

/// `pen mcp serve`: the workspace of `--root` (the current folder by default) on stdio.
async fn run_mcp_serve(command: McpServeCommand, config: &Config) -> ExitCode {
    let roots = if command.roots.is_empty() {
        vec![std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))]
    } else {
        command.roots
    };
    let workspace = match Workspace::new(&roots) {
        Ok(workspace) => workspace,
        Err(e) => return usage(&e.to_string()),
    };
    let offer = crate::mcp_serve::Offer {
        writes: command.allow_writes,
        commands: command.allow_commands,
    };
    let store = if offer.writes {
        match session::default_data_dir().and_then(|dir| SessionStore::open(&dir)) {
            Ok(store) => Some((Arc::new(store), config.checkpoint_store_bytes)),
            Err(e) => {
                eprintln!("pen: writes cannot be recorded: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    // Commands run as pen's own would without asking: in the OS sandbox the config sets.
    let sandbox = if offer.commands {
        config
            .command_sandbox_probed(crate::session::default_data_dir().ok())
            .await
    } else {
        crate::sandbox::CommandSandbox::off()
    };
    let server =
        crate::mcp_serve::PenServer::new(workspace, config.limits(), offer, store, sandbox);
    match crate::mcp_serve::serve_stdio(server).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pen: {e}");
            ExitCode::from(1)
        }
    }
}

/// `pen revert SESSION [TURN] [--force]`.
pub fn run_revert(session_id: &str, turn_id: Option<&str>, force: bool, json: bool) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let fail = |message: String| {
            eprintln!("pen: {message}");
            ExitCode::from(1)
        };
        let store = match session::default_data_dir().and_then(|dir| SessionStore::open(&dir)) {
            Ok(store) => std::sync::Arc::new(store),
            Err(e) => return fail(e.to_string()),
        };
        let turn_id = match turn_id {
            Some(turn) => turn.to_string(),
            None => match store.turns(session_id).map(|turns| turns.last().cloned()) {
                Ok(Some(turn)) => turn,
                Ok(None) => return fail(format!("session {session_id} has no turn")),
                Err(e) => return fail(e.to_string()),
            },
        };
        let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let workspace = match Workspace::new(std::slice::from_ref(&root)) {
            Ok(ws) => ws,
            Err(e) => return fail(e.to_string()),
        };
        let (config, _) = Config::load(crate::config::config_file().as_deref(), std::env::vars());
        let engine = crate::agent::Engine::new(store.clone());
        let scope = crate::checkpoint::Scope {
            store,
            workspace,
            limits: config.limits(),
            editor: None,
        };
        match crate::checkpoint::revert_turn(&engine, scope, session_id, &turn_id, force).await {
            Ok(report) => {
                let result = protocol::RevertTurnResult::new(session_id, report);
                let clean = result.without_checkpoints.is_none()
                    && result.files.iter().all(|f| {
                        use protocol::FileStatus as S;
                        matches!(f.status, S::Reverted | S::Deleted | S::Unchanged)
                    });
                let shown = if human::for_a_person(json) {
                    human::revert_lines(&result, terminal::Style::for_stdout()).join("\n")
                } else {
                    json_line(&result)
                };
                if !print_line(&shown) {
                    return ExitCode::from(EXIT_STDOUT_CLOSED);
                }
                if clean {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(2)
                }
            }
            Err(e) => fail(e.to_string()),
        }
    })
}

/// `pen fork SESSION TURN`.
pub fn run_fork(session_id: &str, turn_id: &str, json: bool) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let store = match session::default_data_dir().and_then(|dir| SessionStore::open(&dir)) {
            Ok(store) => std::sync::Arc::new(store),
            Err(e) => {
                eprintln!("pen: {e}");
                return ExitCode::from(1);
            }
        };
        let engine = crate::agent::Engine::new(store);
        match crate::checkpoint::fork_session(&engine, session_id, turn_id).await {
            Ok(forked) => {
                let result = protocol::ForkSessionResult {
                    session_id: forked,
                    forked_from: session_id.to_string(),
                    before_turn_id: turn_id.to_string(),
                };
                let shown = if human::for_a_person(json) {
                    human::fork_lines(&result, terminal::Style::for_stdout()).join("\n")
                } else {
                    json_line(&result)
                };
                if print_line(&shown) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_STDOUT_CLOSED)
                }
            }
            Err(e) => {
                eprintln!("pen: {e}");
                ExitCode::from(1)
            }
        }
    })
}

/// `pen sessions`: every session with work in it (every one with `--all`), newest first, a
/// line each for a person, else as JSON lines.
pub fn run_sessions(all: bool, json: bool) -> ExitCode {
    let person = human::for_a_person(json).then(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        (now, terminal::Style::for_stdout())
    });
    export(|store, out| {
        let mut cursor: Option<String> = None;
        loop {
            let page = store.list_sessions_with(cursor.as_deref(), EXPORT_PAGE_ROWS, all)?;
            for info in page.sessions {
                let summary = protocol::SessionSummary::from(info);
                match person {
                    Some((now, style)) => {
                        writeln!(out, "{}", human::session_line(&summary, now, style))?
                    }
                    None => writeln!(out, "{}", json_line(&summary))?,
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    })
}

/// `pen transcript ID`: every entry of a session, in order, as JSON lines.
pub fn run_transcript(session_id: &str) -> ExitCode {
    export(|store, out| {
        let mut after: Option<u64> = None;
        loop {
            let page = store.transcript(session_id, after, EXPORT_PAGE_ROWS)?;
            for entry in page.entries {
                writeln!(
                    out,
                    "{}",
                    json_line(&protocol::TranscriptEntry::from(entry))
                )?;
            }
            match page.next_after_seq {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    })
}

fn json_line(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Opens the session store and runs an export into stdout; errors go to stderr with exit 1.
fn export(
    body: impl FnOnce(&SessionStore, &mut dyn std::io::Write) -> anyhow::Result<()>,
) -> ExitCode {
    let result = session::default_data_dir()
        .and_then(|dir| SessionStore::open(&dir))
        .map_err(anyhow::Error::from)
        .and_then(|store| {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            body(&store, &mut out)
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`pen sessions | head -1`): end quietly.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::from(EXIT_STDOUT_CLOSED)
        }
        Err(e) => {
            eprintln!("pen: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs `pen serve` until the client exits or closes stdin.
pub fn run_serve() -> ExitCode {
    let (_log_guard, config) = start_daemon(false);
    let fallback_root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let (stdin, stdout, drained) = match std_streams() {
        Ok(streams) => streams,
        Err(code) => return code,
    };
    runtime.block_on(server::serve(
        stdin,
        stdout,
        ServeOptions {
            config,
            data_dir: session::default_data_dir(),
            fallback_root,
        },
    ));
    // The tasks still holding stdout end with the runtime; then what they queued is written.
    drop(runtime);
    drained.wait(crate::limits::TRANSPORT_WRITER_DRAIN);
    tracing::info!("client gone; pen serve exits");
    ExitCode::SUCCESS
}

/// Runs `pen acp` until the client closes stdin.
pub fn run_acp() -> ExitCode {
    let (_log_guard, config) = start_daemon(true);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let (stdin, stdout, drained) = match std_streams() {
        Ok(streams) => streams,
        Err(code) => return code,
    };
    runtime.block_on(crate::acp::serve(
        stdin,
        stdout,
        crate::acp::AcpOptions {
            config,
            data_dir: session::default_data_dir(),
        },
    ));
    // The tasks still holding stdout end with the runtime; then what they queued is written.
    drop(runtime);
    drained.wait(crate::limits::TRANSPORT_WRITER_DRAIN);
    tracing::info!("client gone; pen acp exits");
    ExitCode::SUCCESS
}

/// The daemon's stdin and stdout, each on a thread of its own (`crate::stdio`: tokio's would
/// grow the blocking pool the tool calls use).
fn std_streams() -> Result<
    (
        crate::stdio::Stdin,
        crate::stdio::Stdout,
        crate::stdio::Drained,
    ),
    ExitCode,
> {
    match crate::stdio::stdin().and_then(|stdin| {
        let (stdout, drained) = crate::stdio::stdout()?;
        Ok((stdin, stdout, drained))
    }) {
        Ok(streams) => Ok(streams),
        Err(e) => {
            eprintln!("pen: cannot start the stdio threads: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// What `pen serve` and `pen acp` do first: log to the file, record a panic in the log with
/// one line on stderr (which editors show as the server's output) rather than a raw backtrace
/// (a panic in a request is caught and answered; stdout stays the protocol's), and load the
/// config, logging each refused value (also on stderr with `echo_warnings`).
fn start_daemon(
    echo_warnings: bool,
) -> (Option<tracing_appender::non_blocking::WorkerGuard>, Config) {
    let guard = init_file_logging();
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("panic: {info}");
        eprintln!("pen: internal error: {info}");
    }));
    let (config, warnings) = Config::load(config::config_file().as_deref(), std::env::vars());
    for warning in warnings {
        tracing::warn!("{warning}");
        if echo_warnings {
            eprintln!("pen: {warning}");
        }
    }
    (guard, config)
}

/// Logs to the capped daily file under the data dir (stdout carries the protocol; see
/// [`crate::logfile`]). The level comes from `PEN_LOG` (default `info`; dependencies at their
/// own level unless named). Logging is best effort: without a writable data dir the daemon runs
/// unlogged.
fn init_file_logging() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let dir = session::default_data_dir().ok()?.join("logs");
    let file = crate::logfile::LogFile::open(&dir).ok()?;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(crate::limits::LOG_BUFFERED_LINES)
        .lossy(true)
        .finish(file);
    let pen_log = std::env::var("PEN_LOG").ok();
    let filter =
        tracing_subscriber::EnvFilter::try_new(crate::logfile::directives(pen_log.as_deref()))
            .unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(crate::logfile::directives(None))
            });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .ok()?;
    Some(guard)
}

fn usage(message: &str) -> ExitCode {
    eprintln!("pen: {message}");
    ExitCode::from(2)
}

/// The multi-threaded runtime `pen run` and `pen serve` run on; a failure to start it is said
/// on stderr and is the command's exit status.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("pen: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

#[cfg(test)]
mod tests {
    use super::usage_line;
    use crate::providers::Usage;

    #[test]
    fn usage_lines_show_the_input_the_cached_share_and_the_output() {
        assert_eq!(
            usage_line(&Usage {
                input_tokens: 4100,
                output_tokens: 30,
                cache_read_tokens: Some(1900),
                cache_write_tokens: Some(2050),
                reasoning_tokens: None,
            }),
            "4100 input tokens (46% cached, 2050 written to the cache), 30 output tokens"
        );
        assert_eq!(
            usage_line(&Usage {
                cache_read_tokens: Some(1920),
                reasoning_tokens: Some(12),
                ..Usage::new(2006, 300)
            }),
            "2006 input tokens (95% cached), 300 output tokens (12 reasoning)"
        );
        // A provider that reports no cache counts: no share is made up.
        assert_eq!(
            usage_line(&Usage::new(120, 30)),
            "120 input tokens, 30 output tokens"
        );
        assert_eq!(
            usage_line(&Usage {
                cache_read_tokens: Some(0),
                ..Usage::new(0, 0)
            }),
            "0 input tokens (0% cached), 0 output tokens"
        );
    }
}
