//! The integration suite, one module per capability.

mod agent;
mod bedrock;
mod cli;
mod common;
mod daemon_sessions;
mod documents;
mod fake_provider;
mod keys;
mod list;
mod lsp_client;
mod providers;
mod read;
mod search;
mod serve;
mod session;
mod write;
