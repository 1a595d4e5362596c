//! pen: a coding-agent daemon with bounded native tools.
//!
//! Modules in reading order, each group separated so rustfmt keeps the order.

/// Every bound, named once.
pub mod limits;

/// Random access to the bytes of a file or buffer (`ByteSource`).
pub mod bytes;

/// Cutting text to a byte bound on a character boundary.
pub mod text;

/// JSON read strictly (no repeated keys) where a repeated key could change a decision.
pub mod json;

/// Permission modes and the table that decides whether a call runs, asks or is refused.
pub mod mode;
/// pen_command's OS sandbox (Landlock and namespaces, applied by `pen __sandbox-exec`).
pub mod sandbox;

/// Typed configuration from file, environment, flags and the editor.
pub mod config;

/// Workspace roots and path confinement.
pub mod workspace;

/// Exact rope-backed views of the files open in the editor.
pub mod documents;

/// The native tools the model is given.
pub mod tools;

/// Disk changes under the workspace roots.
pub mod watch;

/// Model providers behind one trait.
pub mod providers;

/// The typed vocabulary of a session: entries, call outcomes, stop reasons, error kinds.
pub mod transcript;

/// The daemon's log file, capped on disk.
pub mod logfile;

/// The daemon's stdin and stdout on threads of their own.
pub mod stdio;

/// Durable, append-only session transcripts in SQLite.
pub mod session;

/// The prompt budget: the messages of a request that fit the model's input budget.
pub mod budget;

/// The MCP client: the owner's MCP servers as tools (SPEC §11).
pub mod mcp;

/// The agent loop: turns, tool execution, approvals, Stop and context-window recovery.
pub mod agent;

/// Reverting turns and forking sessions (SPEC §13).
pub mod checkpoint;

/// Wire types of the `pen/…` methods.
pub mod protocol;

/// Framing of the LSP base protocol over stdio.
pub mod transport;

/// `pen serve`: the daemon.
pub mod server;

/// `pen acp`: pen as an Agent Client Protocol agent.
pub mod acp;

/// `pen mcp serve`: pen's native tools offered to other agents over MCP.
pub mod mcp_serve;

/// The command line.
pub mod cli;
