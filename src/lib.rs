//! pen: a coding-agent daemon with bounded native tools.
//!
//! Modules in reading order: `limits` (every bound, named once), `workspace` (path
//! confinement), `tools` (the native tools the model is given), `cli` (the command line).

pub mod cli;
pub mod limits;
pub mod session;
pub mod tools;
pub mod workspace;
