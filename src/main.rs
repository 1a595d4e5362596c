//! The `pen` binary: parses the command line and hands off to the library.

use clap::Parser;
use pen::cli::{
    Cli, Command, run_acp, run_serve, run_sessions, run_tool, run_transcript, run_turn,
};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Tool(command) => run_tool(command),
        Command::Serve => run_serve(),
        Command::Acp => run_acp(),
        Command::Run(command) => run_turn(command),
        Command::Sessions { all, json } => run_sessions(all, json),
        Command::Transcript { session_id } => run_transcript(&session_id),
        Command::Revert {
            session_id,
            turn_id,
            force,
            json,
        } => pen::cli::run_revert(&session_id, turn_id.as_deref(), force, json),
        Command::Fork {
            session_id,
            turn_id,
            json,
        } => pen::cli::run_fork(&session_id, &turn_id, json),
        Command::Mcp(command) => pen::cli::run_mcp(command),
    }
}
