//! The request path of a turn: the window it plans under, the plan of each request under the
//! prompt budget (SPEC §6), and the recovery from a context-window rejection.

use super::turn::{Turn, TurnError};
use super::{SHRUNK_HEAD_BYTES, SYSTEM_PROMPT, Trim, TurnEvent, context};
use crate::budget::{self, Budget, BudgetError};
use crate::config::Config;
use crate::providers::window::{ModelWindow, WindowSource};
use crate::providers::{
    CacheHints, ModelRequest, ModelResponse, PartSizes, ProviderError, ProviderKind, StreamEvent,
    ToolDefinition,
};
use crate::tools;
use crate::transcript::{Event, Item};

impl Turn {
    /// The tool schemas a request sends. A server whose template renders no tools never shows
    /// them to the model: pen sends (and counts) none rather than plan for schemas the prompt
    /// will not hold. A native tool not offered under the window is left out
    /// ([`tools::registry::ToolSpec::offered_under`]).
    pub(super) fn definitions(&self) -> Vec<ToolDefinition> {
        let window = self.window();
        if window.tools_dropped {
            return Vec::new();
        }
        let mut catalog = self.tools.catalog();
        catalog.retain(|entry| tools::registry::offered_under(&entry.name, window.tokens));
        tool_definitions(&catalog)
    }

    /// The system part of the session's requests: pen's prompt and the recorded context.
    pub(super) fn system_text(&self) -> String {
        context::system_text(SYSTEM_PROMPT, self.lock_history().context())
    }

    /// One provider request, planned under the prompt budget; on a context-window rejection the
    /// newest large results are cut, the budget drops under the rejected estimate, and the
    /// request is retried once. `None` when Stop cancelled the request.
    pub(super) async fn request_with_recovery(
        &self,
        definitions: &[ToolDefinition],
    ) -> Result<Option<(ModelResponse, u64, Option<String>)>, TurnError> {
        let mut rejection: Option<ProviderError> = None;
        loop {
            let system = self.system_text();
            let (planned, report, estimator) =
                self.plan_request(&system, definitions, rejection.as_ref())?;
            // Policy 4's compaction is recorded before the request goes out, so every later
            // request (and a resumed session) renders the same prefix.
            if let Some(compaction) = &planned.compaction {
                self.append_item(Item::Event(Event::ContextCompacted(compaction.clone())))
                    .await?;
            }
            // Whether this request was planned differently from the one before it (a
            // compaction, a trim, a retry after a rejection): then no earlier end is a prefix.
            let replanned = planned.compaction.is_some() || report.is_some() || rejection.is_some();
            if let Some(report) = report {
                self.append_item(Item::Event(Event::ContextTrimmed(report.clone())))
                    .await?;
                self.emit(TurnEvent::ContextTrimmed(Trim::Budget(report)));
            }
            // The cache hints: the session's id, where the previous request ended while it is
            // still a prefix of this one, and the estimate the planner used.
            let cache = {
                let mut guard = self.lock_history();
                let previous_end = if guard.last_request().is_empty() {
                    // No request of this session was planned in this process (a resumed
                    // session): the previous request ended where the answer to it begins, and
                    // it is a prefix of this one unless this one was planned anew. So a resumed
                    // daemon marks the same previous end the first daemon would have.
                    CacheHints::previous_end_from_history(&planned.messages, replanned)
                } else {
                    CacheHints::previous_end(guard.last_request(), &planned.messages)
                };
                guard.set_last_request(planned.messages.clone());
                CacheHints {
                    key: Some(self.session_id.clone()),
                    previous_end,
                    sizes: Some(PartSizes {
                        head: estimator.text(&system) + estimator.tools(definitions),
                        messages: planned
                            .messages
                            .iter()
                            .map(|m| estimator.message(m))
                            .collect(),
                    }),
                }
            };
            let request = ModelRequest {
                model: self.model.clone(),
                system,
                messages: planned.messages,
                tools: definitions.to_vec(),
                max_output_tokens: u32::try_from(
                    self.window().output_tokens(self.config.max_output_tokens),
                )
                .unwrap_or(u32::MAX),
                cache,
            };
            let on_event = |event: StreamEvent| match event {
                StreamEvent::TextDelta(text) => self.emit(TurnEvent::TextDelta { text }),
            };
            let err = match self
                .provider
                .complete(&request, &on_event, &self.cancel)
                .await
            {
                Ok(mut response) => {
                    let replaced = self
                        .lock_history()
                        .planned()
                        .make_call_ids_unique(&mut response.tool_calls);
                    if replaced > 0 {
                        tracing::warn!(
                            replaced,
                            "the model repeated tool call ids; gave them new ones"
                        );
                    }
                    let warning = response
                        .usage
                        .and_then(|usage| self.provider.check_usage(&request, &usage));
                    return Ok(Some((response, planned.uncalibrated_tokens, warning)));
                }
                Err(err) if err.kind == crate::providers::ErrorKind::Cancelled => return Ok(None),
                Err(err) => err,
            };
            if !err.context_window_exceeded() {
                return Err(TurnError::Provider(err));
            }
            // Later requests of the session, in this turn or the next, plan under this estimate.
            self.append_item(Item::Event(Event::ContextWindowRejected {
                model: self.model.clone(),
                estimated_tokens: planned.estimated_tokens,
                reason: err.message.clone(),
                uncalibrated_tokens: Some(planned.uncalibrated_tokens),
            }))
            .await?;
            if rejection.is_some() {
                return Err(TurnError::ContextWindow(context_message(&err)));
            }
            let large = self.lock_history().planned().newest_large_group();
            if let Some(call_ids) = large {
                self.append_item(Item::Event(Event::ResultsShrunk {
                    call_ids: call_ids.clone(),
                    head_bytes: SHRUNK_HEAD_BYTES as u64,
                    reason: err.message.clone(),
                }))
                .await?;
                self.emit(TurnEvent::ContextTrimmed(Trim::Shrunk {
                    call_ids,
                    head_bytes: SHRUNK_HEAD_BYTES as u64,
                }));
            }
            rejection = Some(err);
        }
    }

    /// Plans the next request from the session's history under the prompt budget (SPEC §6),
    /// with the report to record when it cuts something new and the estimator it planned with.
    pub(super) fn plan_request(
        &self,
        system: &str,
        definitions: &[ToolDefinition],
        rejection: Option<&ProviderError>,
    ) -> Result<
        (
            budget::Plan,
            Option<budget::TrimReport>,
            budget::TokenEstimator,
        ),
        TurnError,
    > {
        let guard = self.lock_history();
        let history = guard.planned();
        let history_context = guard.context();
        let family = provider_family(&self.config);
        let estimator = history.estimator(&self.model, family);
        let window = self.window_with(history);
        let mut limit = self.budget_of(window);
        if let Some(rejected) = history.rejected_at(&self.model, &estimator) {
            limit = limit.below_rejection(rejected);
        }
        let policy = budget::Policy::of(
            self.config.budget_policy,
            self.config.compaction_low_water_percent,
        );
        let plan = history
            .plan_with(policy, system, definitions, limit, &estimator)
            .map_err(
            |err| match (rejection, err) {
                (Some(rejected), err @ BudgetError::TooLarge { .. }) => TurnError::ContextWindow(format!(
                    "The provider rejected the request as over the model's context window ({}); planned again under that size, {err}.",
                    rejected.message
                )),
                // The tool schemas alone do not fit: name the MCP server whose take most.
                (_, err @ BudgetError::TooLarge { part: budget::Part::ToolSchemas, .. }) => {
                    let hints: Vec<String> = instructions_hint(history_context)
                        .into_iter()
                        .chain(self.tools.budget_hint())
                        .collect();
                    TurnError::TooLarge(if hints.is_empty() {
                        format!("The request does not fit the prompt budget: {err}.")
                    } else {
                        format!("The request does not fit the prompt budget: {err}. {}.", hints.join(". "))
                    })
                }
                (_, err @ BudgetError::TooLarge { part: budget::Part::SystemPrompt, .. }) => {
                    TurnError::TooLarge(match instructions_hint(history_context) {
                        Some(hint) => format!("The request does not fit the prompt budget: {err}. {hint}."),
                        None => format!("The request does not fit the prompt budget: {err}."),
                    })
                }
                (_, err @ BudgetError::TooLarge { .. }) => {
                    TurnError::TooLarge(format!("The request does not fit the prompt budget: {err}."))
                }
                (_, err @ BudgetError::InvalidHistory { .. }) => TurnError::Unrepairable(err),
            },
        )?;
        let report = plan
            .report
            .as_ref()
            .filter(|report| history.is_new_trim(report))
            .cloned();
        Ok((plan, report, estimator))
    }

    /// Fits the tools' pages to what the budget of the window this turn plans under leaves
    /// after the system prompt (with the instructions recorded) and the tool schemas (SPEC §3).
    /// The estimate is taken at a ratio of 1, so the page, which the catalog states, changes only
    /// with the window and those parts, not with every calibration (the catalog heads every
    /// request's cached prefix).
    pub(super) fn fit_pages(&self) {
        let budget = self.budget_of(self.window());
        let estimator = budget::TokenEstimator::new(provider_family(&self.config), 1.0);
        self.tools
            .fit_pages(budget.room(&self.system_text(), &self.definitions(), &estimator));
    }

    /// The prompt budget of `window`: less the output it reserves and the margin.
    pub(super) fn budget_of(&self, window: ModelWindow) -> Budget {
        Budget::new(
            window.tokens,
            window.output_tokens(self.config.max_output_tokens),
            window.margin_tokens(self.config.budget_margin_tokens),
        )
    }

    /// The window this turn plans under: the user's setting, else what the engine found, else
    /// (when nothing answered) the window the session recorded for the model before, so a
    /// resumed session plans as it did while its server cannot be asked.
    pub(super) fn window(&self) -> ModelWindow {
        self.window_with(self.lock_history().planned())
    }

    pub(super) fn window_with(&self, history: &budget::History) -> ModelWindow {
        let found = self.found_window;
        match (found.source, history.recorded_window(&self.model)) {
            (WindowSource::Default, Some(recorded)) if recorded.source != WindowSource::Config => {
                recorded
            }
            _ => found,
        }
    }

    /// Says which window the session plans under (one `context_window` event) at its first
    /// turn and whenever the window changes. A window pen found (from the server or the
    /// table) is recorded, so a resumed session plans under it while the server cannot be
    /// asked; the user's setting and the default are not (the config says them again).
    pub(super) async fn record_window(&self) -> Result<(), TurnError> {
        let window = self.window();
        let (recorded, first_turn) = {
            let history = self.lock_history();
            (
                history.planned().recorded_window(&self.model),
                history.last_seq() == 0,
            )
        };
        let found = !matches!(window.source, WindowSource::Config | WindowSource::Default);
        if recorded == Some(window) || (!found && !first_turn) {
            return Ok(());
        }
        if found {
            self.append_item(Item::Event(Event::ContextWindowFound {
                model: self.model.clone(),
                window,
            }))
            .await?;
        }
        self.emit(TurnEvent::ContextWindow {
            model: self.model.clone(),
            window,
        });
        Ok(())
    }
}

/// What to add to a "does not fit" failure when the system part holds the project's
/// instruction files: which, how large, and the setting that bounds them.
fn instructions_hint(context: Option<&crate::transcript::SessionContext>) -> Option<String> {
    let files: Vec<String> = context?
        .instructions
        .iter()
        .filter(|f| f.refused.is_none())
        .map(|f| format!("{} ({} bytes sent)", f.path, f.text.len()))
        .collect();
    if files.is_empty() {
        return None;
    }
    Some(format!(
        "The system part holds the project's instruction files {}: shorten them, or lower instruction_bytes          (pen/setConfig) and start a new session (pen/newSession), since a session keeps the instructions it started with",
        files.join(", ")
    ))
}

/// The turn's last error after a second context-window rejection.
fn context_message(err: &ProviderError) -> String {
    format!(
        "The conversation is still over the model's context window after it was planned under the \
         rejected size and the newest large tool results were cut to 2 KiB ({}). Set \
         context_window_tokens to the model's real window, shorten the prompt, or start a new \
         session (pen/newSession) and carry over only what matters.",
        err.message
    )
}

/// The tool catalog as the provider is told it.
pub(super) fn tool_definitions(catalog: &[tools::CatalogEntry]) -> Vec<ToolDefinition> {
    catalog
        .iter()
        .map(|entry| ToolDefinition {
            name: entry.name.clone(),
            description: entry.description.clone(),
            input_schema: entry.input_schema.clone(),
        })
        .collect()
}

/// The tool limits `config` implies with the pages a turn fits them to as it starts (SPEC §3),
/// for the catalog shown outside a turn (`pen tool --list`, `pen/listTools`): with the window
/// set, to the room its budget leaves after pen's system prompt and the schemas of the tools
/// offered under it. A turn also counts the session's environment, its project instructions
/// and its MCP tools, so its pages may be a little smaller; with the window unset the turn fits
/// them to the window it finds, and these are the cap's pages.
pub fn catalog_limits(config: &Config) -> crate::limits::Limits {
    let limits = config.limits();
    let Some(window) = config.context_window_tokens else {
        return limits;
    };
    let budget = Budget::new(
        window,
        config.max_output_tokens,
        config.budget_margin_tokens,
    );
    let estimator = budget::TokenEstimator::new(provider_family(config), 1.0);
    let mut catalog = tools::registry::catalog(&limits);
    catalog.retain(|entry| tools::registry::offered_under(&entry.name, window));
    let definitions = tool_definitions(&catalog);
    let room = budget.room(SYSTEM_PROMPT, &definitions, &estimator);
    limits.fitted_to_room(room)
}

/// The token-estimate family of the configured provider (an unset provider is OpenAI-style:
/// OpenAI itself or a local OpenAI-compatible server).
fn provider_family(config: &Config) -> ProviderKind {
    config.provider.unwrap_or(ProviderKind::OpenAi)
}
