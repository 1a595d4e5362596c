//! The model's context window when the config does not set it: asked of the server (llama.cpp
//! `GET /props`, Ollama `POST /api/show`, vLLM `GET /v1/models`, LM Studio `GET
//! /api/v0/models`), else looked up in the table of hosted models (`models.json`, each row with
//! its source), else a conservative default.
//!
//! Invariants: discovery never fails a turn (every request is bounded by
//! [`WINDOW_DISCOVERY_TIMEOUT`], and a server that does not answer, or answers something else,
//! is logged and falls through to the next source); the user's `context_window_tokens` always
//! wins; the answer is cached per server and model by the engine.

use crate::config::ProviderKind;
use crate::limits::{
    CONTEXT_WINDOW_TOKENS, FOUND_WINDOW_MARGIN_DIVISOR, FOUND_WINDOW_OUTPUT_DIVISOR,
    MAX_DISCOVERY_BODY_BYTES, OLLAMA_COMPAT_WINDOW_TOKENS, WINDOW_DISCOVERY_TIMEOUT,
};
use crate::providers::facts::Discovery;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::LazyLock;

/// Where the effective context window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The user's `context_window_tokens`.
    Config,
    /// llama.cpp's `GET /props` (`default_generation_settings.n_ctx`, one slot's window).
    LlamaCppProps,
    /// Ollama's `POST /api/show` (`model_info["<arch>.context_length"]`, the trained window).
    OllamaShow,
    /// vLLM's `GET /v1/models` (`max_model_len`).
    VllmModels,
    /// LM Studio's `GET /api/v0/models` (`loaded_context_length`, else `max_context_length`).
    LmStudioModels,
    /// pen's table of hosted models (`src/providers/models.json`).
    HostedTable,
    /// Nothing knew the model: [`CONTEXT_WINDOW_TOKENS`]'s default.
    Default,
}

impl WindowSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::Config => "config",
            WindowSource::LlamaCppProps => "llama_cpp_props",
            WindowSource::OllamaShow => "ollama_show",
            WindowSource::VllmModels => "vllm_models",
            WindowSource::LmStudioModels => "lm_studio_models",
            WindowSource::HostedTable => "hosted_table",
            WindowSource::Default => "default",
        }
    }
}

impl std::fmt::Display for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The context window a session's requests are planned under, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelWindow {
    pub tokens: u64,
    /// The most output tokens the model may produce, when the source says (the hosted table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// The window the model was trained on, when the server says (Ollama's `num_ctx` cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_tokens: Option<u64>,
    /// The server says its chat template renders no tool definitions (llama.cpp
    /// `chat_template_caps.supports_tools: false`): they would never reach the model, so pen
    /// neither sends nor counts them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tools_dropped: bool,
    pub source: WindowSource,
}

impl ModelWindow {
    pub fn new(tokens: u64, source: WindowSource) -> ModelWindow {
        ModelWindow {
            tokens,
            max_output_tokens: None,
            trained_tokens: None,
            tools_dropped: false,
            source,
        }
    }

    /// The conservative window used when nothing knows the model.
    pub fn fallback() -> ModelWindow {
        ModelWindow::new(CONTEXT_WINDOW_TOKENS.default, WindowSource::Default)
    }

    /// Whether this window lies within the bounds a user may set (`context_window_tokens`'s
    /// range), the trained window too: a server's or a stored answer outside them (llama.cpp
    /// reports 0 while a slot is unset; a broken or hostile server 2^64−1) is no answer, so no
    /// window pen plans under is one the config would refuse, and no page arithmetic on it can
    /// wrap.
    pub fn within_bounds(&self) -> bool {
        let bounds = CONTEXT_WINDOW_TOKENS;
        bounds.check(self.tokens).is_ok()
            && self.trained_tokens.is_none_or(|t| bounds.check(t).is_ok())
    }

    /// The output tokens to reserve (and ask for) under this window: `configured`, capped at
    /// the model's own limit, and for a window pen found (not one the user set) at a quarter
    /// of the window, so a 2k local server is not all output reserve.
    pub fn output_tokens(&self, configured: u64) -> u64 {
        let mut tokens = configured;
        if let Some(max) = self.max_output_tokens {
            tokens = tokens.min(max);
        }
        if self.source != WindowSource::Config {
            tokens = tokens.min(self.tokens / FOUND_WINDOW_OUTPUT_DIVISOR);
        }
        tokens.max(1)
    }

    /// The safety margin under this window: `configured`, and for a window pen found at most
    /// 1/32 of it.
    pub fn margin_tokens(&self, configured: u64) -> u64 {
        if self.source == WindowSource::Config {
            configured
        } else {
            configured.min(self.tokens / FOUND_WINDOW_MARGIN_DIVISOR)
        }
    }
}

/// One row of the hosted-model table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostedRow {
    provider: ProviderKind,
    /// The model ids this row covers: those that start with it (the longest match wins, so a
    /// dated id such as `gpt-4o-2024-08-06` finds `gpt-4o`).
    prefix: String,
    context_window: u64,
    max_output_tokens: u64,
    /// Where the figures come from.
    #[allow(dead_code)]
    source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostedTable {
    #[allow(dead_code)]
    about: String,
    models: Vec<HostedRow>,
}

/// The table, parsed once. It is part of the binary and checked by a unit test, so a row that
/// does not parse is a build defect; it then counts as an empty table rather than a crash.
static HOSTED: LazyLock<Vec<HostedRow>> =
    LazyLock::new(
        || match serde_json::from_str::<HostedTable>(include_str!("models.json")) {
            Ok(table) => table.models,
            Err(err) => {
                tracing::error!("the hosted-model table does not parse: {err}");
                Vec::new()
            }
        },
    );

/// The hosted-model table's window for `model` of `kind`: the longest prefix match. Bedrock
/// ids lose their cross-region prefix (`us.`, `eu.`, `apac.`, `global.`…) first, and an
/// `anthropic.` Bedrock id is looked up among Anthropic's rows.
pub fn hosted(kind: ProviderKind, model: &str) -> Option<ModelWindow> {
    // A native Ollama model is a local one; OpenAI-compatible hosts share OpenAI's ids.
    if kind.facts().discovery == Discovery::OllamaShow {
        return None;
    }
    let model = model.trim().to_ascii_lowercase();
    let (kind, id) = match kind {
        ProviderKind::Bedrock => {
            let id = [
                "us.", "eu.", "apac.", "au.", "jp.", "ca.", "us-gov.", "global.",
            ]
            .iter()
            .find_map(|region| model.strip_prefix(region))
            .unwrap_or(&model);
            match id.strip_prefix("anthropic.") {
                Some(rest) => (ProviderKind::Anthropic, rest.to_string()),
                None => (ProviderKind::Bedrock, id.to_string()),
            }
        }
        kind => (kind, model.clone()),
    };
    HOSTED
        .iter()
        .filter(|row| row.provider == kind && id.starts_with(&row.prefix))
        .max_by_key(|row| row.prefix.len())
        .map(|row| ModelWindow {
            tokens: row.context_window,
            max_output_tokens: Some(row.max_output_tokens),
            trained_tokens: None,
            tools_dropped: false,
            source: WindowSource::HostedTable,
        })
}

/// The server's root for `base_url` (`http://host:8080/v1` → `http://host:8080`).
fn server_root(base_url: &str) -> &str {
    let trimmed = base_url.trim_end_matches('/');
    trimmed
        .strip_suffix("/v1")
        .or_else(|| trimmed.strip_suffix("/api"))
        .unwrap_or(trimmed)
}

/// The window the server at `base_url` reports for `model`, or `None` when none of the known
/// discovery endpoints answers for it. For `kind` [`ProviderKind::Ollama`] only `/api/show`
/// is asked (the window is then the trained one, which pen's `num_ctx` asks for); for an
/// OpenAI-compatible server every endpoint is asked at once and the first in the order of
/// [`WindowSource`] that answers wins. Never fails: each failure is logged at debug level.
pub async fn discover(kind: ProviderKind, base_url: &str, model: &str) -> Option<ModelWindow> {
    let client = match super::http_client_builder()
        .timeout(WINDOW_DISCOVERY_TIMEOUT)
        .connect_timeout(WINDOW_DISCOVERY_TIMEOUT)
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            tracing::warn!("no HTTP client for context-window discovery: {err}");
            return None;
        }
    };
    let native_ollama = kind.facts().discovery == Discovery::OllamaShow;
    let root = server_root(base_url);
    let base = base_url.trim_end_matches('/');
    let ollama = async {
        let body = serde_json::json!({ "model": model });
        let show = get_json(client.post(format!("{root}/api/show")).json(&body)).await?;
        let trained = ollama_context_length(&show)?;
        Some(if native_ollama {
            ModelWindow {
                trained_tokens: Some(trained),
                ..ModelWindow::new(trained, WindowSource::OllamaShow)
            }
        } else {
            // The OpenAI-compatible endpoint ignores num_ctx: Ollama's own default holds.
            ModelWindow {
                trained_tokens: Some(trained),
                ..ModelWindow::new(
                    trained.min(OLLAMA_COMPAT_WINDOW_TOKENS),
                    WindowSource::OllamaShow,
                )
            }
        })
    };
    if native_ollama {
        return ollama.await.filter(answered);
    }
    let llama = async {
        let props = get_json(client.get(format!("{root}/props"))).await?;
        let n_ctx = props["default_generation_settings"]["n_ctx"].as_u64()?;
        let tools_dropped = props["chat_template_caps"]["supports_tools"].as_bool() == Some(false);
        Some(ModelWindow {
            tools_dropped,
            ..ModelWindow::new(n_ctx, WindowSource::LlamaCppProps)
        })
    };
    let vllm = async {
        let models = get_json(client.get(format!("{base}/models"))).await?;
        let tokens = listed(&models, model, &["max_model_len"])?;
        Some(ModelWindow::new(tokens, WindowSource::VllmModels))
    };
    let lm_studio = async {
        let models = get_json(client.get(format!("{root}/api/v0/models"))).await?;
        let tokens = listed(
            &models,
            model,
            &["loaded_context_length", "max_context_length"],
        )?;
        Some(ModelWindow::new(tokens, WindowSource::LmStudioModels))
    };
    let (llama, vllm, lm_studio, ollama) = futures::join!(llama, vllm, lm_studio, ollama);
    // A window outside the bounds is not an answer: the next source that gave one wins.
    [llama, vllm, lm_studio, ollama]
        .into_iter()
        .flatten()
        .find(answered)
}

/// Whether a discovered `window` is an answer (see [`ModelWindow::within_bounds`]); logged when
/// it is not.
fn answered(window: &ModelWindow) -> bool {
    let within = window.within_bounds();
    if !within {
        tracing::warn!(
            tokens = window.tokens,
            trained = window.trained_tokens,
            source = %window.source,
            "context-window discovery: the server reported a window outside the bounds of \
             context_window_tokens; not used"
        );
    }
    within
}

/// `<arch>.context_length` of an `/api/show` answer (`model_info["llama.context_length"]`).
fn ollama_context_length(show: &Value) -> Option<u64> {
    let info = show.get("model_info")?.as_object()?;
    info.iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, value)| value.as_u64())
}

/// The first of `fields` on the entry of an OpenAI-style model list (`data: [{id, …}]`) whose
/// id is `model`.
fn listed(models: &Value, model: &str, fields: &[&str]) -> Option<u64> {
    let entry = models["data"]
        .as_array()?
        .iter()
        .find(|entry| entry["id"].as_str() == Some(model))?;
    fields.iter().find_map(|field| entry[*field].as_u64())
}

/// The JSON body of a successful answer to `request`, read up to
/// [`MAX_DISCOVERY_BODY_BYTES`]; `None` (logged) for anything else.
pub(crate) async fn get_json(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = match request.send().await {
        Ok(response) => response,
        Err(err) => {
            tracing::debug!("context-window discovery: {}", without_url(&err));
            return None;
        }
    };
    let url = response.url().path().to_string();
    if !response.status().is_success() {
        tracing::debug!(
            "context-window discovery: {url} answered {}",
            response.status()
        );
        return None;
    }
    if response
        .content_length()
        .is_some_and(|len| len > MAX_DISCOVERY_BODY_BYTES as u64)
    {
        tracing::debug!("context-window discovery: {url} answered too much");
        return None;
    }
    let body = match response.bytes().await {
        Ok(body) if body.len() <= MAX_DISCOVERY_BODY_BYTES => body,
        _ => return None,
    };
    serde_json::from_slice(&body).ok()
}

fn without_url(err: &reqwest::Error) -> String {
    // The URL may carry a key in its query (it never should); the kind of failure is enough.
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "no connection"
    } else {
        "failed"
    };
    format!("a request {kind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosted_table_parses_and_every_row_names_its_source() {
        let table: HostedTable = serde_json::from_str(include_str!("models.json")).unwrap();
        assert!(table.models.len() >= 20);
        for row in &table.models {
            assert!(row.source.starts_with("https://"), "{}", row.prefix);
            assert!(
                row.max_output_tokens <= row.context_window,
                "{}",
                row.prefix
            );
            assert_eq!(row.prefix, row.prefix.to_ascii_lowercase());
        }
    }

    #[test]
    fn hosted_lookup_takes_the_longest_prefix_and_bedrock_regions() {
        let tokens = |kind, model| hosted(kind, model).map(|w| (w.tokens, w.max_output_tokens));
        use ProviderKind::{Anthropic, Bedrock, Ollama, OpenAi};
        assert_eq!(
            tokens(OpenAi, "gpt-4.1-mini"),
            Some((1_047_576, Some(32_768)))
        );
        assert_eq!(
            tokens(OpenAi, "gpt-4o-2024-08-06"),
            Some((128_000, Some(16_384)))
        );
        assert_eq!(tokens(OpenAi, "gpt-4"), Some((8_192, Some(8_192))));
        assert_eq!(
            tokens(Anthropic, "claude-sonnet-4-5-20250929"),
            Some((200_000, Some(64_000)))
        );
        assert_eq!(
            tokens(Bedrock, "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            tokens(Anthropic, "claude-sonnet-4-5")
        );
        assert_eq!(
            tokens(Bedrock, "amazon.nova-pro-v1:0").map(|t| t.0),
            Some(300_000)
        );
        assert_eq!(tokens(OpenAi, "smollm2"), None);
        assert_eq!(tokens(Ollama, "gpt-4o"), None);
        assert_eq!(
            hosted(OpenAi, "gpt-4o").unwrap().source,
            WindowSource::HostedTable
        );
    }

    #[test]
    fn a_found_window_caps_the_output_reserve_and_the_margin() {
        let small = ModelWindow::new(2_048, WindowSource::LlamaCppProps);
        assert_eq!(small.output_tokens(4_096), 512);
        assert_eq!(small.margin_tokens(2_560), 64);
        let set = ModelWindow::new(2_048, WindowSource::Config);
        assert_eq!(
            (set.output_tokens(4_096), set.margin_tokens(2_560)),
            (4_096, 2_560)
        );
        let hosted = hosted(ProviderKind::OpenAi, "gpt-4").unwrap();
        assert_eq!(hosted.output_tokens(10_000), 2_048);
    }

    #[test]
    fn the_server_root_drops_the_api_suffix() {
        assert_eq!(
            server_root("http://127.0.0.1:8080/v1/"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            server_root("http://127.0.0.1:11434"),
            "http://127.0.0.1:11434"
        );
        assert_eq!(server_root("http://h/api"), "http://h");
    }

    #[test]
    fn ollama_show_and_model_lists_are_read() {
        let show = serde_json::json!({"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
        assert_eq!(ollama_context_length(&show), Some(32_768));
        let list = serde_json::json!({"data": [{"id": "a", "max_model_len": 1}, {"id": "m", "loaded_context_length": 4096, "max_context_length": 32768}]});
        assert_eq!(
            listed(&list, "m", &["loaded_context_length", "max_context_length"]),
            Some(4096)
        );
        assert_eq!(listed(&list, "x", &["max_model_len"]), None);
    }
}
