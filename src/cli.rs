//! The command line: `pen tool` calls one native tool with no model and prints the exact
//! observation the model would receive.

use crate::config::{self, Config};
use crate::limits::MAX_TOOL_RESULT_BYTES;
use crate::protocol;
use crate::server::{self, ServeOptions};
use crate::session::{self, SessionStore};
use crate::tools::{self, ToolContext};
use crate::workspace::Workspace;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// List sessions, newest first, one JSON object a line (as pen/listSessions shows them).
    Sessions,
    /// Export a session's transcript, one JSON entry a line (as pen/getTranscript shows them).
    Transcript {
        /// The session id (from `pen sessions`).
        session_id: String,
    },
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
    if command.list {
        let catalog = tools::catalog();
        match serde_json::to_string(&catalog) {
            Ok(text) => println!("{text}"),
            Err(e) => return usage(&format!("cannot print the catalog: {e}")),
        }
        return ExitCode::SUCCESS;
    }
    let Some(name) = command.name else {
        return usage("name a tool, or pass --list");
    };
    if !tools::catalog().iter().any(|spec| spec.name == name) {
        let names: Vec<&str> = tools::catalog().iter().map(|s| s.name).collect();
        return usage(&format!(
            "there is no tool named `{name}`; the tools are {}",
            names.join(", ")
        ));
    }
    let arguments: serde_json::Value = match serde_json::from_str(&command.arguments) {
        Ok(value) => value,
        Err(e) => return usage(&format!("the arguments are not valid JSON: {e}")),
    };
    let mut config = boot_config();
    if let Some(max) = command.max_result_bytes {
        config.max_tool_result_bytes = max;
    }
    let limits = config.limits();
    let workspace = match Workspace::new(std::slice::from_ref(&command.root)) {
        Ok(ws) => ws,
        Err(e) => return usage(&e.to_string()),
    };
    let ctx = ToolContext {
        workspace: &workspace,
        limits: &limits,
        ledger: None,
        editor: None,
    };
    let result = tools::call(&name, &arguments, &ctx);
    println!("{}", tools::observation(&result, &limits));
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

/// How many rows the export commands fetch per store call.
const EXPORT_PAGE: usize = 200;

/// `pen sessions`: every session, newest first, as JSON lines.
pub fn run_sessions() -> ExitCode {
    export(|store, out| {
        let mut cursor: Option<String> = None;
        loop {
            let page = store.list_sessions(cursor.as_deref(), EXPORT_PAGE)?;
            for info in page.sessions {
                writeln!(out, "{}", json_line(&protocol::SessionSummary::from(info)))?;
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
            let page = store.transcript(session_id, after, EXPORT_PAGE)?;
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
        Err(e) => {
            eprintln!("pen: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs `pen serve` until the client exits or closes stdin.
pub fn run_serve() -> ExitCode {
    let _log_guard = init_file_logging();
    // A panic is caught per request and answered; record it in the log with one line on
    // stderr (which editors show as the server's output) rather than a raw backtrace.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("panic: {info}");
        eprintln!("pen: internal error: {info}");
    }));
    let (config, warnings) = Config::load(config::config_file().as_deref(), std::env::vars());
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let fallback_root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pen: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(server::serve(
        tokio::io::stdin(),
        tokio::io::stdout(),
        ServeOptions {
            config,
            data_dir: session::default_data_dir(),
            fallback_root,
        },
    ));
    tracing::info!("client gone; pen serve exits");
    ExitCode::SUCCESS
}

/// Logs to a daily-rolling file under the data dir (stdout carries the protocol). The level
/// comes from `PEN_LOG` (default `info`). Logging is best effort: without a writable data dir
/// the daemon runs unlogged.
fn init_file_logging() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let dir = session::default_data_dir().ok()?.join("logs");
    std::fs::create_dir_all(&dir).ok()?;
    let appender = tracing_appender::rolling::daily(&dir, "pen.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = tracing_subscriber::EnvFilter::try_from_env("PEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
