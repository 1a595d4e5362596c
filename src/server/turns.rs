//! `pen/prompt` and `pen/stop`: a thin front end over the turn engine, and the ordered queue that
//! carries a turn's events and approval requests to the client.

use super::*;

/// The JSON-RPC error code for a second prompt while a session's turn runs (the range
/// -32000..-32099 is for implementation-defined server errors).
const SESSION_BUSY: i64 = -32001;

impl Backend {
    /// Runs one turn and answers when it ends. While it runs, `pen/event` notifications and
    /// `$/progress` report it; `pen/stop` ends it.
    pub(super) async fn prompt(&self, params: PromptParams) -> jsonrpc::Result<PromptResponse> {
        let engine = self.engine()?;
        let session_id = params.session_id.clone();
        let lookup = session_id.clone();
        let exists = self
            .with_sessions(move |store| store.get_session(&lookup))
            .await;
        exists?;
        // One turn per session here and across every pen sharing the database (SPEC §4): the
        // session is claimed before anything of the turn runs, and released when it ends.
        // pen/stop fires it: it ends the turn wherever it is, the MCP servers' start included.
        let pending = engine
            .begin(&session_id, CancellationToken::new())
            .await
            .map_err(|err| begin_error(err, &session_id))?;
        let turn_id = pending.turn_id().to_string();
        let config = read(&self.state.config).clone();
        let editor: Arc<dyn tools::Editor + Send + Sync> = self.state.clone();
        let local = LocalTools {
            workspace: self.state.current_workspace().map_err(|e| internal(&e))?,
            limits: config.limits(),
            ledger: Arc::clone(&self.state.ledger),
            editor: Some(editor),
            search_editor: None,
            watch: None,
            fitted: Default::default(),
            sandbox: config
                .command_sandbox_probed(crate::session::default_data_dir().ok())
                .await,
        };
        let prompt = self.with_focus(&params, &local).await?;
        let (client, progress) = (self.client.clone(), *read(&self.state.work_done_progress));
        let channel = agent::Channel::queued("editor", |queue| {
            forward_events(client, queue, progress, turn_id.clone())
        });
        let setup = agent::TurnSetup {
            root: local.workspace.roots()[0].path.clone(),
            tools: local,
            config,
            mcp: &self.state.mcp,
            client_mcp_servers: Default::default(),
        };
        let outcome = pending.run_set_up(&prompt, setup, channel).await;
        Ok(PromptResponse::new(session_id, turn_id, outcome))
    }

    /// The prompt's text with what the owner has in view, read from the editor's buffers.
    async fn with_focus(
        &self,
        params: &PromptParams,
        local: &LocalTools,
    ) -> jsonrpc::Result<String> {
        let mut prompt = params.text.clone();
        if let Some(context) = &params.context {
            let focus = context.to_focus().map_err(jsonrpc::Error::invalid_params)?;
            let workspace = local.workspace.clone();
            let limits = local.limits.clone();
            let buffers = Arc::clone(&self.state);
            let rendered = tokio::task::spawn_blocking(move || {
                agent::render_focus(
                    &focus,
                    &workspace,
                    Some(&*buffers as &dyn tools::Editor),
                    &limits,
                )
            })
            .await
            .map_err(|e| internal(&e.to_string()))?;
            prompt.push_str(&rendered);
        }
        Ok(prompt)
    }

    /// `pen/getSessionContext`: the instructions and environment the session's requests carry
    /// (recorded at its first turn), or, before that, what its first turn would read now.
    pub(super) async fn get_session_context(
        &self,
        params: protocol::GetSessionContextParams,
    ) -> jsonrpc::Result<protocol::SessionContextResponse> {
        use crate::transcript::{Event, Item};
        let session_id = params.session_id.clone();
        let scanned = self
            .with_sessions(move |store| {
                store.get_session(&session_id)?;
                let mut found = (None, None, Vec::new());
                let mut after = None;
                loop {
                    let page = store.transcript(
                        &session_id,
                        after,
                        crate::limits::MAX_TRANSCRIPT_PAGE_ENTRIES,
                    )?;
                    for entry in &page.entries {
                        match entry.item() {
                            Item::Event(Event::SessionContext(context)) if found.0.is_none() => {
                                found.0 = Some(context)
                            }
                            Item::Event(Event::InstructionsChanged { instructions }) => {
                                found.1 = Some(instructions)
                            }
                            Item::Event(Event::InstructionsDelivered { files, .. }) => {
                                found.2.extend(files)
                            }
                            _ => {}
                        }
                    }
                    match page.next_after_seq {
                        Some(next) => after = Some(next),
                        None => break,
                    }
                }
                Ok(found)
            })
            .await?;
        let (context, changed, delivered) = scanned;
        let recorded = context.is_some();
        let context = match context {
            Some(context) => context,
            None => {
                let workspace = self.state.current_workspace().map_err(|e| internal(&e))?;
                let config = read(&self.state.config).clone();
                tokio::task::spawn_blocking(move || agent::gather(&workspace, &config))
                    .await
                    .map_err(|e| internal(&e.to_string()))?
            }
        };
        let info = |files: &[crate::transcript::InstructionFile]| {
            files
                .iter()
                .map(protocol::InstructionFileInfo::from)
                .collect::<Vec<_>>()
        };
        Ok(protocol::SessionContextResponse {
            session_id: params.session_id,
            recorded,
            instructions: info(&context.instructions),
            changed: changed.as_deref().map(info),
            delivered: info(&delivered),
            environment: context.environment.clone(),
            instructions_text: context
                .instructions
                .iter()
                .map(agent::render_file)
                .collect(),
        })
    }

    /// `pen/setMode`: switches an existing session's permission mode, from its running turn's
    /// next call on.
    pub(super) async fn set_mode(
        &self,
        params: protocol::SetModeParams,
    ) -> jsonrpc::Result<protocol::SetModeResponse> {
        let engine = self.engine()?;
        let lookup = params.session_id.clone();
        self.with_sessions(move |store| store.get_session(&lookup))
            .await?;
        engine.set_mode(&params.session_id, params.mode.into());
        Ok(protocol::SetModeResponse {
            session_id: params.session_id,
            mode: params.mode,
        })
    }

    pub(super) async fn stop(&self, params: StopParams) -> jsonrpc::Result<StopResponse> {
        let stopped = match &self.state.engine {
            Ok(engine) => engine.stop(&params.session_id),
            Err(_) => false,
        };
        Ok(StopResponse { stopped })
    }
}

/// The answer to a `pen/prompt` whose session could not be claimed.
fn begin_error(err: agent::BeginError, session_id: &str) -> jsonrpc::Error {
    match err {
        err @ agent::BeginError::Running(_) => jsonrpc::Error {
            code: jsonrpc::ErrorCode::ServerError(SESSION_BUSY),
            message: err.to_string().into(),
            data: Some(serde_json::json!({"kind": agent::TurnErrorKind::SessionBusy.as_str()})),
        },
        agent::BeginError::Store(SessionError::LeaseHeld { pid, .. }) => jsonrpc::Error {
            code: jsonrpc::ErrorCode::ServerError(SESSION_BUSY),
            message: format!("session is running a turn in another pen (pid {pid})").into(),
            data: Some(
                serde_json::json!({"kind": agent::TurnErrorKind::SessionBusy.as_str(), "pid": pid}),
            ),
        },
        agent::BeginError::Store(SessionError::NotFound(_)) => {
            jsonrpc::Error::invalid_params(format!("no session has the id {session_id:?}"))
        }
        agent::BeginError::Store(other) => internal(&other.to_string()),
    }
}

/// Sends a turn's events as `pen/event` notifications, in order, and mirrors them as `$/progress`
/// when the client takes progress tokens. Approval requests travel the same queue, so one is
/// never written before the events that came before it (the assistant's text, the call's
/// `tool_call_started`).
async fn forward_events(
    client: Client,
    mut events: tokio::sync::mpsc::UnboundedReceiver<agent::Outgoing>,
    progress_supported: bool,
    turn_id: String,
) {
    use tower_lsp_server::ls_types::ProgressToken;
    let token = ProgressToken::String(format!("pen/{turn_id}"));
    let progress = if progress_supported
        && client
            .create_work_done_progress(token.clone())
            .await
            .is_ok()
    {
        Some(
            client
                .progress(token, "pen")
                .with_message("thinking")
                .begin()
                .await,
        )
    } else {
        None
    };
    while let Some(outgoing) = events.recv().await {
        let event = match outgoing {
            agent::Outgoing::Event(event) => event,
            agent::Outgoing::Approval(request, answer) => {
                // Queued now, after every earlier event; answered in its own task so that
                // events after it (a withdrawal on Stop) are not held up.
                let client = client.clone();
                let params = protocol::ApprovalParams::from(request);
                let sent = async move { client.send_request::<RequestApproval>(params).await };
                tokio::spawn(async move {
                    let _ = answer.send(match sent.await {
                        Ok(ApprovalResponse { decision, reason }) => Ok((decision.into(), reason)),
                        // A malformed answer is no answer: never an allow (fail closed).
                        Err(err) => Err(format!(
                            "the editor gave no usable answer to pen/requestApproval: {}",
                            err.message
                        )),
                    });
                });
                continue;
            }
        };
        if let Some(progress) = &progress {
            let message = match &event.event {
                agent::TurnEvent::ToolCallStarted { tool, .. } => Some(format!("running {tool}")),
                agent::TurnEvent::ApprovalRequested(_) => Some("waiting for approval".to_string()),
                agent::TurnEvent::ContextTrimmed(_) => Some("trimming context".to_string()),
                _ => None,
            };
            if let Some(message) = message {
                progress.report(message).await;
            }
        }
        client
            .send_notification::<PenEvent>(protocol::EventParams::from(event))
            .await;
    }
    if let Some(progress) = progress {
        progress.finish().await;
    }
}
