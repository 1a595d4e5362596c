//! The integration suite, one module per capability.

mod cli;
mod common;
mod list;
mod read;
mod search;
mod session;
mod write;
