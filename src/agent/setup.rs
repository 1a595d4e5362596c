//! One turn set-up for every front end (`pen serve`, `pen acp`, `pen run`, and any to come): a
//! front end claims the session ([`super::Engine::begin`]), says how the turn reaches it (a
//! [`Channel`]) and what it runs with (a [`TurnSetup`]), and [`PendingTurn::run_set_up`] does
//! the rest the same way for all of them: the turn's MCP servers start through its approvals,
//! their tools join the front end's, the turn runs, and every event reaches the front end
//! before the turn's answer does.

use super::{
    AgentEvent, ApprovalAnswer, ApprovalRequest, Approver, LocalTools, PendingTurn,
    StartThroughApprover, TurnOutcome, TurnSpec, TurnTools,
};
use crate::config::{Config, McpServerConfig};
use crate::mcp::McpManager;
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// What a turn sends its front end through a queued [`Channel`], in the order the turn produced
/// it.
pub enum Outgoing {
    /// One event of the turn.
    Event(AgentEvent),
    /// An approval request, answered on the channel.
    Approval(ApprovalRequest, oneshot::Sender<ApprovalAnswer>),
}

/// How a turn reaches its front end: who approves its calls, where its events go, and the task
/// that carries them, if any (awaited when the turn ends).
pub struct Channel {
    approver: Arc<dyn Approver>,
    on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
    forwarder: Option<tokio::task::JoinHandle<()>>,
}

impl Channel {
    /// The turn's events and approval requests in one ordered queue, which `forward` carries to
    /// the front end's `peer` (named when it is gone), so an approval request is never sent
    /// before the events that came before it. `forward` runs until the turn ends.
    pub fn queued<F>(
        peer: &'static str,
        forward: impl FnOnce(mpsc::UnboundedReceiver<Outgoing>) -> F,
    ) -> Channel
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (outgoing, queue) = mpsc::unbounded_channel();
        let forwarder = tokio::spawn(forward(queue));
        let events = outgoing.clone();
        Channel {
            approver: Arc::new(QueueApprover { outgoing, peer }),
            on_event: Arc::new(move |event| {
                let _ = events.send(Outgoing::Event(event));
            }),
            forwarder: Some(forwarder),
        }
    }

    /// Events handled as the turn makes them, and `approver` asked directly.
    pub fn direct(
        approver: Arc<dyn Approver>,
        on_event: impl Fn(AgentEvent) + Send + Sync + 'static,
    ) -> Channel {
        Channel {
            approver,
            on_event: Arc::new(on_event),
            forwarder: None,
        }
    }
}

/// Asks through a turn's queue: the front end's forwarder sends the request and answers it.
struct QueueApprover {
    outgoing: mpsc::UnboundedSender<Outgoing>,
    peer: &'static str,
}

impl Approver for QueueApprover {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let (answer_tx, answer_rx) = oneshot::channel();
        let queued = self.outgoing.send(Outgoing::Approval(request, answer_tx));
        let peer = self.peer;
        Box::pin(async move {
            if queued.is_err() {
                return Err(format!("the turn's connection to the {peer} is gone"));
            }
            answer_rx
                .await
                .unwrap_or_else(|_| Err(format!("the {peer}'s answer was lost")))
        })
    }
}

/// What a front end runs one turn with.
pub struct TurnSetup<'a> {
    /// The configuration the turn runs under; its `mcp_servers` start as the turn begins.
    pub config: Config,
    /// The front end's own tools (the native ones over its workspace).
    pub tools: LocalTools,
    /// Where the turn's MCP servers run (started, or found running).
    pub mcp: &'a McpManager,
    /// MCP servers the client gives beside the configured ones (ACP's `mcpServers`).
    pub client_mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The workspace root, whose project servers (`.mcp.json`) ask the owner before they start.
    pub root: PathBuf,
}

impl PendingTurn {
    /// Runs the turn for `prompt` with `setup`'s tools and those of its MCP servers, started
    /// (or found running) as the turn begins, a project server asking the owner first through
    /// the turn's approver; its Stop ends the start too. Returns once every event of the turn
    /// has reached the front end.
    pub async fn run_set_up(
        self,
        prompt: &str,
        setup: TurnSetup<'_>,
        channel: Channel,
    ) -> TurnOutcome {
        let Channel {
            approver,
            on_event,
            forwarder,
        } = channel;
        let mut servers = setup.config.mcp_servers.clone();
        servers.extend(setup.client_mcp_servers);
        let start = StartThroughApprover {
            approver: Arc::clone(&approver),
            session_id: self.session_id().to_string(),
            turn_id: self.turn_id().to_string(),
            mode: self.engine().mode(self.session_id(), &setup.config),
        };
        let mcp = setup
            .mcp
            .prepare(&servers, &setup.root, Some(&start), self.cancel())
            .await;
        // It holds the turn's approver, whose queue must close when the turn ends.
        drop(start);
        let spec = TurnSpec {
            tools: Arc::new(TurnTools::with_mcp(
                setup.tools,
                mcp,
                setup.config.limits().max_tool_result_bytes,
            )),
            config: setup.config,
            approver,
            on_event,
        };
        let outcome = self.run(prompt, spec).await;
        // Every event of the turn reaches the front end before the answer does.
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        outcome
    }
}
