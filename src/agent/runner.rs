//! The turn runner, [`Engine`]: one place that starts, runs and stops turns, for every front end
//! (`pen serve`, `pen acp`, `pen run`, the tests, the bench). The turn itself is [`super::turn`];
//! the engine of its tool calls is [`super::engine`].
//!
//! It owns the turn registry (one running turn per session in this process; the session lease
//! makes it one across processes), the provider (built once per configuration, rebuilt when the
//! configuration changes), and a write-through in-memory history of each session it ran a turn
//! in: a turn loads only the entries appended since this engine last saw the session (by
//! another pen, or a crash recovery), and each entry the turn commits is added to the history
//! as it is committed, so planning a request costs O(new entries), never a re-read of the
//! session. Every SQLite call runs on a blocking thread.

use super::history::SessionHistory;
use super::turn::Turn;
use super::{Approver, ToolHost, TurnErrorKind, TurnLease, TurnOutcome};
use crate::config::{Config, ProviderKind};
use crate::mode::Mode;
use crate::providers::Provider;
use crate::providers::choice::{ChoiceError, Target, chosen_from_config};
use crate::providers::facts::Discovery;
use crate::providers::window::{self, ModelWindow, WindowSource};
use crate::session::{SessionError, SessionStore};
use crate::transcript::StopReason;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::AgentEvent;

/// What a front end supplies for one turn.
pub struct TurnSpec {
    /// The configuration the turn runs under (budget, limits, approvals, provider).
    pub config: Config,
    /// The turn's tools ([`super::TurnTools`]: the native ones, then its MCP servers').
    pub tools: Arc<dyn ToolHost>,
    /// Who approves calls that need the owner.
    pub approver: Arc<dyn Approver>,
    /// Receives the turn's events in order.
    pub on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
}

/// Why a turn could not start.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    /// A turn of the session is running in this process.
    #[error(
        "a turn is already running in session {0}; wait for its pen/prompt answer or send pen/stop"
    )]
    Running(String),
    /// Another pen holds the session's lease, or the store failed.
    #[error(transparent)]
    Store(#[from] SessionError),
}

impl BeginError {
    /// The kind a client acts on.
    pub fn kind(&self) -> TurnErrorKind {
        match self {
            BeginError::Running(_) | BeginError::Store(SessionError::LeaseHeld { .. }) => {
                TurnErrorKind::SessionBusy
            }
            BeginError::Store(_) => TurnErrorKind::Store,
        }
    }
}

/// A provider built for a configuration: the configuration's key, the provider, its target.
type BuiltProvider = (String, Arc<dyn Provider>, Target);

/// Where the engine's provider comes from.
enum Providers {
    /// Built from the turn's configuration, kept while the configuration stays the same.
    FromConfig(tokio::sync::Mutex<Option<BuiltProvider>>),
    /// One provider for every turn (tests and benchmarks).
    Fixed(Arc<dyn Provider>, String),
}

/// The turn engine. Cheap to share (`Arc`).
pub struct Engine {
    store: Arc<SessionStore>,
    providers: Providers,
    /// The Stop switch of each session with a running turn.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// The history of each session a turn ran in, while no turn holds it (a running turn
    /// holds its own). At most `MAX_CACHED_HISTORIES`; the least recently used is forgotten.
    histories: Mutex<Vec<(String, SessionHistory)>>,
    /// The window found for each server and model, for the process (a failed discovery is not
    /// kept, so a server started later is asked again).
    windows: tokio::sync::Mutex<HashMap<Target, ModelWindow>>,
    /// The targets already told that nothing knew their window (the notice is said once).
    unknown_windows: Mutex<std::collections::HashSet<Target>>,
    /// The permission mode each session was switched to in this process.
    modes: Arc<SessionModes>,
}

/// The permission mode each session was switched to in this process (`pen/setMode`, ACP's
/// `session/set_mode`); a session never switched runs in its turn's configured `mode`. A
/// running turn reads it at each call, so a switch applies from the next call on.
#[derive(Debug, Default)]
pub(super) struct SessionModes(Mutex<HashMap<String, Mode>>);

impl SessionModes {
    /// The mode a turn of `session_id` runs in under `config`: the one it was switched to, else
    /// the configured `mode`.
    pub(super) fn of(&self, session_id: &str, config: &Config) -> Mode {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session_id)
            .copied()
            .unwrap_or(config.mode)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// A turn that has its session (registered here, under the session's lease) and is ready to
/// run. Dropping it without running releases both.
pub struct PendingTurn {
    engine: Arc<Engine>,
    session_id: String,
    turn_id: String,
    lease: Option<TurnLease>,
    cancel: CancellationToken,
}

impl Engine {
    /// An engine whose provider is built from each turn's configuration.
    pub fn new(store: Arc<SessionStore>) -> Arc<Engine> {
        Engine::build(store, Providers::FromConfig(tokio::sync::Mutex::new(None)))
    }

    /// An engine that gives every turn `provider` and `model`.
    pub fn with_provider(
        store: Arc<SessionStore>,
        provider: Arc<dyn Provider>,
        model: impl Into<String>,
    ) -> Arc<Engine> {
        Engine::build(store, Providers::Fixed(provider, model.into()))
    }

    fn build(store: Arc<SessionStore>, providers: Providers) -> Arc<Engine> {
        Arc::new(Engine {
            store,
            providers,
            running: Mutex::default(),
            histories: Mutex::default(),
            windows: tokio::sync::Mutex::default(),
            unknown_windows: Mutex::default(),
            modes: Arc::default(),
        })
    }

    /// Switches `session_id` to `mode`, from its running turn's next call on.
    pub fn set_mode(&self, session_id: &str, mode: Mode) {
        self.modes
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id.to_string(), mode);
    }

    /// The mode a turn of `session_id` runs in under `config`: the one it was switched to,
    /// else the configured `mode`.
    pub fn mode(&self, session_id: &str, config: &Config) -> Mode {
        self.modes.of(session_id, config)
    }

    pub fn store(&self) -> &Arc<SessionStore> {
        &self.store
    }

    /// The provider and model for `config`: the one built for the same configuration before,
    /// else a new one (a failure is not kept, so a provider started later is found).
    pub async fn provider(
        &self,
        config: &Config,
    ) -> Result<(Arc<dyn Provider>, String), ChoiceError> {
        self.provider_and_target(config)
            .await
            .map(|(provider, target)| (provider, target.model))
    }

    /// [`Engine::provider`] with what it talks to. A fixed provider's target is the config's
    /// provider and base URL.
    pub async fn provider_and_target(
        &self,
        config: &Config,
    ) -> Result<(Arc<dyn Provider>, Target), ChoiceError> {
        match &self.providers {
            Providers::Fixed(provider, model) => Ok((
                Arc::clone(provider),
                Target {
                    kind: config.provider.unwrap_or(ProviderKind::OpenAi),
                    base_url: config.base_url.clone(),
                    model: model.clone(),
                },
            )),
            Providers::FromConfig(cache) => {
                let key = config.to_json().to_string();
                let mut cached = cache.lock().await;
                if let Some((built_for, provider, target)) = cached.as_ref()
                    && *built_for == key
                {
                    return Ok((Arc::clone(provider), target.clone()));
                }
                let chosen = chosen_from_config(config).await?;
                *cached = Some((key, Arc::clone(&chosen.provider), chosen.target.clone()));
                Ok((chosen.provider, chosen.target))
            }
        }
    }

    /// The context window for `config`'s model and where it came from (SPEC §7): the user's
    /// `context_window_tokens`, else what the server reports (asked once per server and model
    /// in this process), else the hosted-model table, else the conservative default, said once
    /// per server and model. Never fails for want of a window: only for want of a provider.
    pub async fn window(&self, config: &Config) -> Result<(Target, ModelWindow), ChoiceError> {
        let (_, target) = self.provider_and_target(config).await?;
        let window = self.window_for(config, &target).await;
        Ok((target, window))
    }

    /// [`Engine::window`] for a known target.
    pub async fn window_for(&self, config: &Config, target: &Target) -> ModelWindow {
        if let Some(tokens) = config.context_window_tokens {
            return ModelWindow::new(tokens, WindowSource::Config);
        }
        let mut windows = self.windows.lock().await;
        if let Some(found) = windows.get(target) {
            return *found;
        }
        // Only local-server APIs are asked; Anthropic and Bedrock (even behind a proxy's
        // base URL) have no such endpoint, and the table knows their models.
        let facts = target.kind.facts();
        let server = match facts.discovery {
            Discovery::ServerThenTable => target.base_url.as_deref(),
            Discovery::OllamaShow => {
                Some(target.base_url.as_deref().unwrap_or(facts.default_base_url))
            }
            Discovery::HostedTable => None,
        };
        let discovered = match server {
            Some(server) => window::discover(target.kind, server, &target.model).await,
            None => None,
        };
        let found = discovered.or_else(|| window::hosted(target.kind, &target.model));
        match found {
            Some(found) => {
                tracing::info!(
                    model = %target.model,
                    tokens = found.tokens,
                    source = %found.source,
                    "context window found"
                );
                windows.insert(target.clone(), found);
                found
            }
            None => {
                let fallback = ModelWindow::fallback();
                let first = self
                    .unknown_windows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(target.clone());
                if first {
                    tracing::warn!(
                        model = %target.model,
                        "{}",
                        unknown_window_notice(&target.model, fallback.tokens)
                    );
                }
                fallback
            }
        }
    }

    /// Claims `session_id` for a new turn: refused while a turn of it runs here or in another
    /// pen (the lease), or when the session does not exist. `cancel` is the turn's Stop switch
    /// ([`Engine::stop`] fires it too).
    pub async fn begin(
        self: &Arc<Self>,
        session_id: &str,
        cancel: CancellationToken,
    ) -> Result<PendingTurn, BeginError> {
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            if running.contains_key(session_id) {
                return Err(BeginError::Running(session_id.to_string()));
            }
            running.insert(session_id.to_string(), cancel.clone());
        }
        let mut pending = PendingTurn {
            engine: Arc::clone(self),
            session_id: session_id.to_string(),
            turn_id: format!("t_{}", uuid::Uuid::now_v7().simple()),
            lease: None,
            cancel,
        };
        // On failure `pending` is dropped, which unregisters the session.
        pending.lease = Some(TurnLease::acquire(Arc::clone(&self.store), session_id).await?);
        Ok(pending)
    }

    /// Claims the session and runs one turn in it: [`Engine::begin`] then [`PendingTurn::run`],
    /// a session that cannot be claimed ending the turn with `error` at once (kind
    /// `session_busy` while another turn runs it).
    pub async fn run_turn(
        self: &Arc<Self>,
        session_id: &str,
        prompt: &str,
        spec: TurnSpec,
        cancel: CancellationToken,
    ) -> TurnOutcome {
        match self.begin(session_id, cancel).await {
            Ok(pending) => pending.run(prompt, spec).await,
            Err(err) => TurnOutcome::failed(err.kind(), err.to_string()),
        }
    }

    /// Fires the Stop switch of the session's running turn; whether one was running.
    pub fn stop(&self, session_id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(session_id) {
            Some(cancel) => {
                cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether a turn of the session runs in this process.
    pub fn is_running(&self, session_id: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(session_id)
    }

    fn take_history(&self, session_id: &str) -> SessionHistory {
        let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
        match histories.iter().position(|(id, _)| id == session_id) {
            Some(at) => histories.remove(at).1,
            None => SessionHistory::default(),
        }
    }

    fn keep_history(&self, session_id: &str, history: SessionHistory) {
        let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
        histories.retain(|(id, _)| id != session_id);
        if histories.len() >= crate::limits::MAX_CACHED_HISTORIES {
            histories.remove(0);
        }
        histories.push((session_id.to_string(), history));
    }
}

impl PendingTurn {
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The engine the turn runs on.
    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The turn's Stop switch.
    pub(super) fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Gives the session back without running a turn, once its lease is released: a revert or
    /// fork that held it answers only then, so the next claim, in any pen, finds it free (a
    /// dropped claim releases its lease on a blocking thread, after the answer may have gone).
    pub async fn release(mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release().await;
        }
    }

    /// Runs the turn for `prompt` to its end and releases the session, however it ends. A
    /// provider that cannot be built ends it at once with `error` (kind `no_provider`), before
    /// anything is written.
    pub async fn run(self, prompt: &str, spec: TurnSpec) -> TurnOutcome {
        let span = tracing::info_span!("turn", session = %self.session_id, turn = %self.turn_id);
        self.run_in_span(prompt, spec).instrument(span).await
    }

    async fn run_in_span(mut self, prompt: &str, spec: TurnSpec) -> TurnOutcome {
        let Some(lease) = self.lease.take() else {
            return TurnOutcome::failed(TurnErrorKind::Store, "the turn has no lease".into());
        };
        let engine = Arc::clone(&self.engine);
        let (provider, target) = match engine.provider_and_target(&spec.config).await {
            Ok(found) => found,
            Err(error) => {
                lease.release().await;
                return TurnOutcome::failed(TurnErrorKind::NoProvider, error.to_string());
            }
        };
        let found_window = engine.window_for(&spec.config, &target).await;
        let model = target.model;
        let history = engine.take_history(&self.session_id);
        let turn = Turn {
            store: Arc::clone(&engine.store),
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            provider,
            model,
            found_window,
            config: spec.config,
            modes: Arc::clone(&engine.modes),
            tools: spec.tools,
            approver: spec.approver,
            history: Mutex::new(history),
            usage: Mutex::new(None),
            on_event: spec.on_event,
            cancel: self.cancel.clone(),
            seq: AtomicU64::new(0),
        };
        let lost = lease.lost();
        let cancel = self.cancel.clone();
        let stopper = tokio::spawn(async move {
            lost.cancelled().await;
            tracing::warn!("the session's lease was taken over; stopping the turn");
            cancel.cancel();
        });
        let outcome = turn.run_to_end(prompt).await;
        stopper.abort();
        lease.release().await;
        let history = turn.history.into_inner().unwrap_or_else(|p| p.into_inner());
        // A history the turn could not keep in step with the store (a failed append) is not
        // kept: the next turn reads the session again.
        if history.in_step() {
            engine.keep_history(&self.session_id, history);
        }
        outcome
    }
}

impl Drop for PendingTurn {
    fn drop(&mut self) {
        self.engine
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.session_id);
    }
}

/// What pen says once when nothing knows a model's window.
pub fn unknown_window_notice(model: &str, tokens: u64) -> String {
    format!(
        "no server or table knows the context window of `{model}`: planning under {tokens} \
         tokens; set context_window_tokens to the model's window"
    )
}

impl TurnOutcome {
    /// A turn that ended with `error` before it began.
    pub fn failed(kind: TurnErrorKind, message: String) -> TurnOutcome {
        TurnOutcome {
            stop_reason: StopReason::Error,
            last_error: Some(message),
            error_kind: Some(kind),
            usage: None,
            session_usage: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(model: &str) -> Config {
        let mut config = Config::default();
        for (key, value) in [
            ("provider", "openai"),
            ("base_url", "http://127.0.0.1:9/v1"),
            ("model", model),
        ] {
            config
                .set(key, &serde_json::Value::String(value.into()))
                .unwrap();
        }
        config
    }

    /// The provider is built once per configuration and rebuilt when it changes (building one
    /// may probe a local server, and a built client keeps its connections).
    #[tokio::test]
    async fn the_provider_is_built_once_per_configuration() {
        let data = tempfile::tempdir().unwrap();
        let store = Arc::new(SessionStore::open(data.path()).unwrap());
        let engine = Engine::new(store);
        let (first, model) = engine.provider(&local("a")).await.unwrap();
        assert_eq!(model, "a");
        let (again, _) = engine.provider(&local("a")).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same configuration");
        let (other, model) = engine.provider(&local("b")).await.unwrap();
        assert_eq!(model, "b");
        assert!(!Arc::ptr_eq(&first, &other), "a changed configuration");
    }
}
