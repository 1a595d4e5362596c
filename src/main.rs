//! The `pen` binary: parses the command line and hands off to the library.

use clap::Parser;
use pen::cli::{Cli, Command, run_serve, run_tool};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Tool(command) => run_tool(command),
        Command::Serve => run_serve(),
    }
}
