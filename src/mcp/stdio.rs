//! A stdio server's connection: rmcp's newline-delimited JSON-RPC over the child's stdin, and
//! its stdout relayed line by line so that a message over [`MAX_MCP_MESSAGE_BYTES`] is never
//! silently lost.
//!
//! rmcp reads at most 16 MiB a line and drops a longer one with a log line, so a call whose
//! answer is that large would wait out its whole `tool_timeout_secs`. The relay passes every
//! line within the bound on unchanged; a longer one is skipped as it streams by (never held in
//! memory) and wakes every call in flight on the connection ([`Connection::too_large`]), which
//! then fails at once as too large.

use crate::limits::{MAX_MCP_MESSAGE_BYTES, MCP_EXIT_GRACE_SECS, MCP_RELAY_BUFFER_BYTES};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, DuplexStream};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::Notify;

/// A started stdio server, as rmcp's transport. Dropping it kills the process.
pub struct StdioTransport {
    inner: AsyncRwTransport<RoleClient, DuplexStream, ChildStdin>,
    child: Child,
}

/// What starting a stdio server gives: its transport, its stderr (for the tail kept to say why
/// it died), and what wakes the calls in flight when it sends a message over the bound.
pub struct Started {
    pub transport: StdioTransport,
    pub stderr: Option<ChildStderr>,
    pub too_large: Arc<Notify>,
}

/// Starts `command` with piped stdio, killed when its transport is dropped.
pub fn spawn(mut command: tokio::process::Command, server: &str) -> std::io::Result<Started> {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other(
            "the server's stdio could not be piped",
        ));
    };
    let stderr = child.stderr.take();
    let (to_rmcp, from_relay) = tokio::io::duplex(MCP_RELAY_BUFFER_BYTES);
    let too_large = Arc::new(Notify::new());
    tokio::spawn(relay(
        stdout,
        to_rmcp,
        Arc::clone(&too_large),
        server.to_string(),
    ));
    let inner =
        AsyncRwTransport::new_client(from_relay, stdin).with_max_line_length(MAX_MCP_MESSAGE_BYTES);
    Ok(Started {
        transport: StdioTransport { inner, child },
        stderr,
        too_large,
    })
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    /// Closes the server's stdin, which tells it to exit, and kills it if it has not within
    /// [`MCP_EXIT_GRACE_SECS`].
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await?;
        let grace = Duration::from_secs(MCP_EXIT_GRACE_SECS);
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// One step of the relay, decided while the read buffer is borrowed.
enum Step {
    /// More of the line is to come.
    More,
    /// The line is whole: pass it on.
    Line,
    /// The line passed the bound: drop what was kept and skip the rest of it.
    TooLarge { ended: bool },
    /// Skipping the rest of a line too large; `true` when it ended here.
    Skipped { ended: bool },
}

/// Copies the server's stdout to rmcp a line at a time until either side closes; a line over
/// [`MAX_MCP_MESSAGE_BYTES`] (its newline counted, as rmcp counts it) is skipped and wakes the
/// calls waiting on `too_large`.
async fn relay(
    stdout: ChildStdout,
    mut to_rmcp: DuplexStream,
    too_large: Arc<Notify>,
    server: String,
) {
    let mut reader = tokio::io::BufReader::with_capacity(MCP_RELAY_BUFFER_BYTES, stdout);
    let mut line: Vec<u8> = Vec::new();
    let mut skipping = false;
    loop {
        let (taken, step) = {
            let available = match reader.fill_buf().await {
                Ok([]) | Err(_) => return,
                Ok(available) => available,
            };
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |at| at + 1);
            let ended = newline.is_some();
            let step = if skipping {
                Step::Skipped { ended }
            } else if line.len() + take > MAX_MCP_MESSAGE_BYTES {
                Step::TooLarge { ended }
            } else {
                line.extend_from_slice(&available[..take]);
                if ended { Step::Line } else { Step::More }
            };
            (take, step)
        };
        reader.consume(taken);
        match step {
            Step::More => {}
            Step::Line => {
                if to_rmcp.write_all(&line).await.is_err() {
                    return;
                }
                line.clear();
            }
            Step::TooLarge { ended } => {
                tracing::warn!(%server, "a message over {MAX_MCP_MESSAGE_BYTES} bytes was skipped; the calls waiting on the server fail as too large");
                line = Vec::new();
                skipping = !ended;
                too_large.notify_waiters();
            }
            Step::Skipped { ended } => skipping = !ended,
        }
    }
}
