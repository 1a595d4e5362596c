//! Which provider a turn uses: the config's `provider`, or for a new user with none configured,
//! OpenAI when `OPENAI_API_KEY` is set, else an Ollama server answering on 127.0.0.1:11434,
//! through its native API (`provider = "ollama"`, which sizes the window of every request).
//! (`agent` re-exports [`provider_from_config`] and [`NO_PROVIDER`].)

use crate::config::Config;
use crate::limits::OLLAMA_PROBE_TIMEOUT;
use crate::providers::{self, Provider, ProviderError, ProviderKind, ProviderSettings};
use std::sync::Arc;
use std::time::Duration;

/// The message for a user with no provider at all: the three ways to configure one, as
/// environment variables, as `pen run` flags and as config keys.
pub const NO_PROVIDER: &str = "no model provider is configured. Configure one of:\n\
  1. OpenAI or any OpenAI-compatible API: set OPENAI_API_KEY (and PEN_MODEL to choose the model).\n\
  2. Anthropic: set PEN_PROVIDER=anthropic and ANTHROPIC_API_KEY (or Bedrock: PEN_PROVIDER=bedrock, PEN_MODEL and the AWS_* variables).\n\
  3. A local server: run Ollama on 127.0.0.1:11434, or set PEN_BASE_URL and PEN_MODEL to a llama.cpp, vLLM or LM Studio endpoint and its model (e.g. http://127.0.0.1:8080/v1).\n\
For one `pen run`, the flags --provider, --model and --base-url do the same \
(e.g. pen run \"...\" --provider openai --model smollm2 --base-url http://127.0.0.1:8080/v1).\n\
The same keys (provider, model, base_url, api_key_env) go in ~/.config/pen/config.toml or the editor's settings.";

/// Why no provider could be built for a configuration. Every variant says what to set; the
/// front ends report it as a `no_provider` turn error (ACP: *auth required*).
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    /// Nothing is configured and no local Ollama answered.
    #[error("{}", NO_PROVIDER)]
    NoProvider,
    /// No model is named; a custom `base_url` (`at`) never gets a hosted provider's default
    /// model, which that server would not have.
    #[error(
        "no model is configured{}: set the model key (PEN_MODEL, --model or the editor setting)",
        .at.as_ref().map_or_else(String::new, |url| format!(" for the server at {url}"))
    )]
    NoModel { at: Option<String> },
    /// Thinking counts against the output limit, so the budget must leave room for the answer.
    #[error(
        "reasoning_budget_tokens ({budget}) must be less than max_output_tokens ({max_output}), \
         which the thinking counts against: raise max_output_tokens or lower \
         reasoning_budget_tokens"
    )]
    ReasoningBudget { budget: u64, max_output: u64 },
    /// The provider needs a key and `variable` holds none. `chosen_by` says how the variable was
    /// chosen; `local` offers a local server instead, where one would do.
    #[error("{what}: set {variable} in the environment ({chosen_by}){local}")]
    MissingKey {
        what: String,
        variable: String,
        chosen_by: &'static str,
        local: &'static str,
    },
    /// The provider refused its settings for another reason (a base URL that is not http(s)…).
    #[error("{}", .0.message)]
    Refused(ProviderError),
    /// The blocking thread that builds the provider failed.
    #[error("building the provider failed: {0}")]
    Build(tokio::task::JoinError),
}

/// The provider and model for `config`, reading keys from the environment.
pub async fn provider_from_config(
    config: &Config,
) -> Result<(Arc<dyn Provider>, String), ChoiceError> {
    chosen_from_config(config)
        .await
        .map(|chosen| (chosen.provider, chosen.target.model))
}

/// What a turn talks to: the API, its address and the model (what the context window is
/// found for).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub kind: ProviderKind,
    /// `None` for the provider's public endpoint (native Ollama: 127.0.0.1:11434).
    pub base_url: Option<String>,
    pub model: String,
}

/// A provider built for a configuration, and what it talks to.
pub struct Chosen {
    pub provider: Arc<dyn Provider>,
    pub target: Target,
}

/// The provider for `config` and its [`Target`], reading keys from the environment.
pub async fn chosen_from_config(config: &Config) -> Result<Chosen, ChoiceError> {
    let local_model = if needs_probe(config, &env) {
        probe_ollama().await
    } else {
        None
    };
    let settings = settings(config, &env, local_model)?;
    let key = key_variable(config, settings.kind);
    // Building sets up the HTTP client (TLS) and, for Bedrock, reads `~/.aws/credentials`:
    // work for a blocking thread, not the runtime.
    let (provider, settings) = tokio::task::spawn_blocking(move || {
        build(&settings, key.as_deref()).map(|provider| (provider, settings))
    })
    .await
    .map_err(ChoiceError::Build)??;
    Ok(Chosen {
        provider: Arc::from(provider),
        target: Target {
            kind: settings.kind,
            base_url: settings.base_url,
            model: settings.model,
        },
    })
}

/// The environment variable the key of a `kind` provider is read from: `api_key_env` when the
/// config names one, else the provider's usual variable; `None` for Bedrock, whose credentials
/// are AWS's own.
fn key_variable(config: &Config, kind: ProviderKind) -> Option<String> {
    config
        .api_key_env
        .clone()
        .or_else(|| kind.facts().key_variable.map(str::to_string))
}

/// Builds the provider. When it is refused for want of a key, the error names the variable the
/// key is read from and `api_key_env`, which the providers, knowing only the key, cannot say.
fn build(
    settings: &ProviderSettings,
    key_variable: Option<&str>,
) -> Result<Box<dyn Provider>, ChoiceError> {
    let error = match providers::build(settings) {
        Ok(provider) => return Ok(provider),
        Err(error) => error,
    };
    let Some(variable) = key_variable else {
        return Err(ChoiceError::Refused(error));
    };
    // The refusal was about the key exactly when the same settings with a key are accepted.
    let mut with_key = settings.clone();
    with_key.api_key = Some("placeholder".to_string());
    if settings.api_key.is_some() || providers::build(&with_key).is_err() {
        return Err(ChoiceError::Refused(error));
    }
    let what = error
        .message
        .split(';')
        .next()
        .unwrap_or(&error.message)
        .to_string();
    let local = if settings.kind == ProviderKind::OpenAi {
        ", or point base_url (--base-url, PEN_BASE_URL) at a local server such as Ollama or \
         llama-server"
    } else {
        ""
    };
    // Whether the variable is the provider's usual one or the one `api_key_env` names, the
    // user must learn that `api_key_env` is the key that chooses it.
    let chosen_by = if settings.kind.facts().key_variable == Some(variable) {
        "api_key_env names a different variable to read it from"
    } else {
        "the variable api_key_env names"
    };
    Err(ChoiceError::MissingKey {
        what,
        variable: variable.to_string(),
        chosen_by,
        local,
    })
}

/// The OpenAI key in the provider's usual variable: with no provider configured, it makes the
/// user an OpenAI user.
fn openai_key(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    ProviderKind::OpenAi.facts().key_variable.and_then(env)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the local Ollama is asked for its first model: for a new user with nothing
/// configured, and for `provider = "ollama"` on its default address with no model named.
fn needs_probe(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> bool {
    let new_user =
        config.provider.is_none() && config.base_url.is_none() && openai_key(env).is_none();
    let ollama_without_model = config.provider == Some(ProviderKind::Ollama)
        && config.base_url.is_none()
        && config.model.is_none();
    new_user || ollama_without_model
}

/// The first model a local Ollama has, if one answers.
async fn probe_ollama() -> Option<String> {
    // The client's TLS set-up reads the system's certificates: a blocking thread's work.
    let client = tokio::task::spawn_blocking(|| {
        super::http_client_builder()
            .timeout(OLLAMA_PROBE_TIMEOUT)
            .build()
            .ok()
    })
    .await
    .ok()??;
    let tags: serde_json::Value = client
        .get(format!(
            "{}/api/tags",
            ProviderKind::Ollama.facts().default_base_url
        ))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    tags["models"][0]["name"].as_str().map(str::to_string)
}

/// The settings for `config`; `local_model` is what a local Ollama offers, when one answered.
fn settings(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    local_model: Option<String>,
) -> Result<ProviderSettings, ChoiceError> {
    let default_model = |kind: ProviderKind| kind.facts().default_model.map(str::to_string);
    let (kind, base_url, fallback_model) = match config.provider {
        // Ollama has no default model of its own: the probe found the first installed one.
        Some(ProviderKind::Ollama) => (ProviderKind::Ollama, config.base_url.clone(), local_model),
        // A hosted provider's default model is for its own endpoint only: a server at a custom
        // base URL would be sent a model it does not have (and a misspelt `model` key would go
        // unnoticed).
        Some(kind) if config.base_url.is_some() => (kind, config.base_url.clone(), None),
        Some(kind) => (kind, None, default_model(kind)),
        None if config.base_url.is_some() => (ProviderKind::OpenAi, config.base_url.clone(), None),
        None if openai_key(env).is_some() => (
            ProviderKind::OpenAi,
            None,
            default_model(ProviderKind::OpenAi),
        ),
        None => match local_model {
            // The native API: its OpenAI-compatible endpoint ignores num_ctx and truncates.
            Some(model) => (ProviderKind::Ollama, None, Some(model)),
            None => return Err(ChoiceError::NoProvider),
        },
    };
    let model = config
        .model
        .clone()
        .or(fallback_model)
        .ok_or_else(|| ChoiceError::NoModel {
            at: config.base_url.clone(),
        })?;
    let key_name = key_variable(config, kind);
    let mut settings = ProviderSettings::new(kind, model);
    settings.base_url = base_url;
    settings.api_key = key_name.as_deref().and_then(env);
    settings.key_variable = key_name;
    settings.request_timeout = Duration::from_secs(config.request_timeout_secs);
    settings.max_attempts = u32::try_from(config.max_attempts).unwrap_or(u32::MAX);
    settings.reasoning_budget_tokens =
        u32::try_from(config.reasoning_budget_tokens).unwrap_or(u32::MAX);
    settings.prompt_cache_key = config.prompt_cache_key;
    // Thinking counts against the output limit: a budget that leaves no room for the answer is
    // refused here, before any request, naming both keys (the backends check it again).
    if config.reasoning_budget_tokens > 0
        && config.reasoning_budget_tokens >= config.max_output_tokens
        && !matches!(kind, ProviderKind::OpenAi | ProviderKind::Ollama)
    {
        return Err(ChoiceError::ReasoningBudget {
            budget: config.reasoning_budget_tokens,
            max_output: config.max_output_tokens,
        });
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_new_user_gets_openai_then_ollama_then_the_three_ways() {
        let config = Config::default();
        let openai = settings(&config, &with_env(&[("OPENAI_API_KEY", "sk-1")]), None).unwrap();
        assert_eq!(
            (
                openai.kind,
                openai.model.as_str(),
                openai.api_key.as_deref()
            ),
            (ProviderKind::OpenAi, "gpt-4.1-mini", Some("sk-1"))
        );
        let ollama = settings(&config, &with_env(&[]), Some("qwen2.5-coder:7b".into())).unwrap();
        assert_eq!((ollama.kind, ollama.base_url), (ProviderKind::Ollama, None));
        assert_eq!(ollama.model, "qwen2.5-coder:7b");
        let none = settings(&config, &with_env(&[]), None).unwrap_err();
        assert!(matches!(none, ChoiceError::NoProvider), "{none:?}");
        let none = none.to_string();
        assert!(
            none.contains("OPENAI_API_KEY")
                && none.contains("ANTHROPIC_API_KEY")
                && none.contains("Ollama"),
            "{none}"
        );
        assert!(
            none.contains("--provider") && none.contains("--model") && none.contains("--base-url"),
            "{none}"
        );
        assert!(needs_probe(&config, &with_env(&[])));
        assert!(!needs_probe(&config, &with_env(&[("OPENAI_API_KEY", "k")])));
    }

    #[test]
    fn configured_providers_read_their_key_from_the_named_variable() {
        let mut config = Config::default();
        config
            .set("provider", &serde_json::json!("anthropic"))
            .unwrap();
        config
            .set("api_key_env", &serde_json::json!("MY_KEY"))
            .unwrap();
        let s = settings(
            &config,
            &with_env(&[("MY_KEY", "k2"), ("ANTHROPIC_API_KEY", "other")]),
            None,
        )
        .unwrap();
        assert_eq!(
            (s.kind, s.api_key.as_deref()),
            (ProviderKind::Anthropic, Some("k2"))
        );
        let mut local = Config::default();
        local
            .set("base_url", &serde_json::json!("http://127.0.0.1:8080/v1"))
            .unwrap();
        let no_model = settings(&local, &with_env(&[]), None).unwrap_err();
        assert_eq!(
            no_model.to_string(),
            "no model is configured for the server at http://127.0.0.1:8080/v1: set the model key \
             (PEN_MODEL, --model or the editor setting)"
        );
        // Naming the provider does not bring its hosted default model to a custom server.
        let mut named = local.clone();
        named.set("provider", &serde_json::json!("openai")).unwrap();
        assert!(matches!(
            settings(&named, &with_env(&[("OPENAI_API_KEY", "k")]), None),
            Err(ChoiceError::NoModel { .. })
        ));
        local.set("model", &serde_json::json!("smollm2")).unwrap();
        let s = settings(&local, &with_env(&[]), None).unwrap();
        assert_eq!(
            (s.kind, s.base_url.as_deref(), s.api_key),
            (ProviderKind::OpenAi, Some("http://127.0.0.1:8080/v1"), None)
        );
    }

    #[test]
    fn a_reasoning_budget_must_leave_room_for_the_answer() {
        let mut config = Config::default();
        config
            .set("provider", &serde_json::json!("anthropic"))
            .unwrap();
        config
            .set("reasoning_budget_tokens", &serde_json::json!(4096))
            .unwrap();
        let env = with_env(&[("ANTHROPIC_API_KEY", "k")]);
        let error = settings(&config, &env, None).unwrap_err().to_string();
        assert!(
            error.contains(
                "reasoning_budget_tokens (4096) must be less than max_output_tokens (4096)"
            ),
            "{error}"
        );
        config
            .set("max_output_tokens", &serde_json::json!(8192))
            .unwrap();
        assert_eq!(
            settings(&config, &env, None)
                .unwrap()
                .reasoning_budget_tokens,
            4096
        );
        // OpenAI-compatible servers ignore the key, so it cannot be wrong for them.
        config
            .set("provider", &serde_json::json!("openai"))
            .unwrap();
        config
            .set("max_output_tokens", &serde_json::json!(1024))
            .unwrap();
        assert!(settings(&config, &with_env(&[("OPENAI_API_KEY", "k")]), None).is_ok());
    }

    #[test]
    fn a_missing_key_is_reported_with_the_variable_it_is_read_from() {
        let mut openai = Config::default();
        openai
            .set("provider", &serde_json::json!("openai"))
            .unwrap();
        let s = settings(&openai, &with_env(&[]), None).unwrap();
        let error = build(&s, key_variable(&openai, s.kind).as_deref())
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("needs an API key")
                && error.contains("set OPENAI_API_KEY")
                && error.contains("api_key_env")
                && error.contains("--base-url"),
            "{error}"
        );

        let mut anthropic = Config::default();
        anthropic
            .set("provider", &serde_json::json!("anthropic"))
            .unwrap();
        anthropic
            .set("api_key_env", &serde_json::json!("MY_ANTHROPIC_KEY"))
            .unwrap();
        let s = settings(&anthropic, &with_env(&[]), None).unwrap();
        let error = build(&s, key_variable(&anthropic, s.kind).as_deref())
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains(
                "set MY_ANTHROPIC_KEY in the environment (the variable api_key_env names)"
            ),
            "{error}"
        );

        // Other refusals keep their own words: here a base URL that is not http(s).
        let mut s = settings(&openai, &with_env(&[]), None).unwrap();
        s.base_url = Some("localhost:11434".into());
        let error = build(&s, key_variable(&openai, s.kind).as_deref())
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("is not an http"), "{error}");
        assert!(!error.contains("OPENAI_API_KEY"), "{error}");
    }
}
