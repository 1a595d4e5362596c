//! The integration suite, one module per capability.

mod acp;
mod agent;
mod bedrock;
mod cache;
mod cache_figures;
mod cli;
mod common;
mod confinement;
mod daemon_sessions;
mod documents;
mod durability;
mod error_kinds;
mod fake_provider;
mod keys;
mod list;
mod lsp_client;
mod mcp;
mod old_sessions;
mod providers;
mod read;
mod registry;
mod repo;
mod search;
mod serve;
mod session;
mod write;
