//! Errors that say what to do: the one place a provider's refusal gets the hint a new user
//! needs (SPEC's `pen/event` error data, `pen run` and ACP all show the error's message, so all
//! of them show the hint). Only OpenAI-compatible servers need them: the hosted APIs refuse to
//! start without a key (a `Config` error before any request) and have no base URL to get wrong.
//!
//! - a 401 when no key was sent names the variable the key is read from (`OPENAI_API_KEY`, or
//!   the one `api_key_env` names);
//! - a server that does not have the configured model is asked for its model list
//!   (`GET {base}/models`), and the error names what it lists;
//! - any other 404 of the chat path is a base URL without `/v1`, most often: the error names
//!   the URL tried and the base URL to set instead.

use super::{ProviderError, window};
use crate::limits::{MAX_HINT_MODELS, WINDOW_DISCOVERY_TIMEOUT};

/// What the hints need to know of the request that failed.
pub struct Attempt<'a> {
    /// The base URL the chat path was appended to (no trailing slash).
    pub base: &'a str,
    /// The URL the request went to.
    pub url: &'a str,
    pub model: &'a str,
    /// Whether the request carried a key.
    pub key_sent: bool,
    /// The environment variable the key is read from, if the config names one.
    pub key_variable: Option<&'a str>,
}

/// `error` with the hint its failure calls for, if any; `models` lists the server's models
/// (asked only for a model the server does not have).
pub async fn explain<F>(
    mut error: ProviderError,
    attempt: &Attempt<'_>,
    models: impl FnOnce() -> F,
) -> ProviderError
where
    F: std::future::Future<Output = Option<Vec<String>>>,
{
    let missing_model = matches!(error.status, Some(400 | 404))
        && names_a_missing_model(&error.message, attempt.model);
    let listed = if missing_model { models().await } else { None };
    let hint = match (error.status, listed) {
        (Some(401), _) if !attempt.key_sent => Some(match attempt.key_variable {
            Some(variable) => format!(
                "no API key was sent: set {variable} in the environment (or name the variable \
                 that holds the key with api_key_env)"
            ),
            None => "no API key was sent: name the environment variable that holds the key \
                     with api_key_env"
                .to_string(),
        }),
        (_, Some(listed)) => Some(models_hint(attempt, &listed)),
        // A server with no model list that does not have the model said so itself.
        _ if missing_model => None,
        (Some(404), None) if !attempt.base.ends_with("/v1") => Some(format!(
            "{} was not found: add /v1 to base_url? (base_url = \"{}/v1\")",
            attempt.url, attempt.base
        )),
        (Some(404), None) => Some(format!(
            "{} was not found: check base_url (the chat path is appended to it)",
            attempt.url
        )),
        _ => None,
    };
    if let Some(hint) = hint {
        error.message = format!("{}; {hint}", error.message);
    }
    error
}

/// Whether a refusal's wording says the model is unknown (OpenAI's `model_not_found`, Ollama's
/// "model \"x\" not found", vLLM's "The model `x` does not exist").
fn names_a_missing_model(message: &str, model: &str) -> bool {
    let lower = message.to_lowercase();
    let missing = [
        "not found",
        "does not exist",
        "not exist",
        "no such model",
        "unknown model",
    ]
    .iter()
    .any(|phrase| lower.contains(phrase));
    missing && (lower.contains("model") || message.contains(model))
}

/// What to say once the server listed its models.
fn models_hint(attempt: &Attempt<'_>, listed: &[String]) -> String {
    if listed.is_empty() {
        return format!(
            "the server at {} lists no models: load or pull `{}` there first",
            attempt.base, attempt.model
        );
    }
    let mut shown = listed
        .iter()
        .take(MAX_HINT_MODELS)
        .map(|id| format!("`{}`", crate::text::cut(id, crate::limits::MAX_MODEL_BYTES)))
        .collect::<Vec<_>>()
        .join(", ");
    if listed.len() > MAX_HINT_MODELS {
        shown.push_str(&format!(" and {} more", listed.len() - MAX_HINT_MODELS));
    }
    format!(
        "the server at {} has no model `{}`; it lists {shown} (set the model key to one of them)",
        attempt.base, attempt.model
    )
}

/// The model ids an OpenAI-style `GET {base}/models` answers (`data: [{id}]`), read within the
/// discovery's bounds; `None` when the server does not answer one.
pub async fn list_models(
    client: &reqwest::Client,
    base: &str,
    headers: reqwest::header::HeaderMap,
) -> Option<Vec<String>> {
    let request = client
        .get(format!("{base}/models"))
        .headers(headers)
        .timeout(WINDOW_DISCOVERY_TIMEOUT);
    let models = window::get_json(request).await?;
    Some(
        models["data"]
            .as_array()?
            .iter()
            .filter_map(|entry| entry["id"].as_str().map(str::to_string))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ErrorKind;

    fn refused(status: u16, message: &str) -> ProviderError {
        ProviderError {
            status: Some(status),
            ..ProviderError::new(ErrorKind::BadRequest, message)
        }
    }

    fn attempt<'a>(base: &'a str, url: &'a str, key_sent: bool) -> Attempt<'a> {
        Attempt {
            base,
            url,
            model: "qwen",
            key_sent,
            key_variable: Some("OPENAI_API_KEY"),
        }
    }

    fn explained(error: ProviderError, attempt: &Attempt<'_>, models: &[&str]) -> String {
        let models: Vec<String> = models.iter().map(|m| m.to_string()).collect();
        futures::executor::block_on(explain(error, attempt, || async { Some(models) })).message
    }

    #[test]
    fn each_refusal_gets_the_hint_it_calls_for() {
        let at = "http://127.0.0.1:8080";
        let chat = "http://127.0.0.1:8080/chat/completions";
        let no_key = attempt(at, chat, false);
        assert_eq!(
            explained(refused(401, "HTTP 401: unauthorized"), &no_key, &[]),
            "HTTP 401: unauthorized; no API key was sent: set OPENAI_API_KEY in the environment \
             (or name the variable that holds the key with api_key_env)"
        );
        // A key that was sent and refused is the provider's word alone.
        assert_eq!(
            explained(refused(401, "bad key"), &attempt(at, chat, true), &[]),
            "bad key"
        );
        assert_eq!(
            explained(refused(404, "HTTP 404: File Not Found"), &no_key, &[]),
            "HTTP 404: File Not Found; http://127.0.0.1:8080/chat/completions was not found: add \
             /v1 to base_url? (base_url = \"http://127.0.0.1:8080/v1\")"
        );
        let v1 = attempt("http://h/v1", "http://h/v1/chat/completions", true);
        assert_eq!(
            explained(
                refused(
                    404,
                    "HTTP 404: model \"qwen\" not found, try pulling it first"
                ),
                &v1,
                &["llama3.2:1b", "smollm2"]
            ),
            "HTTP 404: model \"qwen\" not found, try pulling it first; the server at http://h/v1 \
             has no model `qwen`; it lists `llama3.2:1b`, `smollm2` (set the model key to one of \
             them)"
        );
        let many: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let listed = explained(refused(404, "The model `qwen` does not exist."), &v1, &many);
        assert!(
            listed.ends_with("`m19` and 5 more (set the model key to one of them)"),
            "{listed}"
        );
        assert_eq!(
            explained(refused(404, "HTTP 404: nothing here"), &v1, &[]),
            "HTTP 404: nothing here; http://h/v1/chat/completions was not found: check base_url \
             (the chat path is appended to it)"
        );
        // Other refusals are left as they are.
        assert_eq!(explained(refused(400, "bad tools"), &v1, &[]), "bad tools");
    }
}
