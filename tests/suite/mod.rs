//! The integration suite, one module per capability.

mod bedrock;
mod cli;
mod common;
mod daemon_sessions;
mod documents;
mod list;
mod lsp_client;
mod read;
mod search;
mod serve;
mod session;
mod write;
