//! Typed configuration and the one place every source of it is validated.
//!
//! Sources, later ones winning: `dirs::config_dir()/pen/config.toml`, `PEN_*` environment
//! variables, command-line flags, then the editor's `initializationOptions` and `pen/setConfig`.
//! Every source goes through [`Config::set`], so a key means the same thing and has the same
//! bounds wherever it is written. At boot an invalid value is reported and the default kept;
//! at run time it is refused.

use crate::limits::{
    BUDGET_MARGIN_TOKENS, BUDGET_POLICY, Bounds, CHECKPOINT_STORE_BYTES,
    COMPACTION_LOW_WATER_PERCENT, CONTEXT_WINDOW_TOKENS, INSTRUCTION_BYTES, LimitError, Limits,
    MAX_API_KEY_ENV_BYTES, MAX_ATTEMPTS, MAX_BASE_URL_BYTES, MAX_CONFIG_FILE_BYTES,
    MAX_CONFIG_SHOWN_VALUE_BYTES, MAX_MODEL_BYTES, MAX_OUTPUT_TOKENS, MAX_TOOL_RESULT_BYTES,
    MAX_TURN_REQUESTS, REASONING_BUDGET_TOKENS, REQUEST_TIMEOUT_SECS,
};
pub mod mcp;

use crate::mode::Mode;
pub use mcp::{McpServerConfig, McpTransport};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown config key `{key}`{}; the keys are {known}", did_you_mean(.nearest))]
    UnknownKey {
        key: String,
        /// The known key nearest in spelling, when one is near enough to be a typo of it.
        nearest: Option<&'static str>,
        known: String,
    },
    #[error("config key `{key}` must be {expected}, got {got}")]
    WrongType {
        key: String,
        expected: &'static str,
        got: String,
    },
    #[error("config key `{key}` must be one of {allowed}, got `{got}`")]
    NotOneOf {
        key: String,
        got: String,
        allowed: String,
    },
    #[error("config key `{key}` is {len} bytes long; its limit is {max} bytes")]
    TooLong { key: String, len: usize, max: usize },
    #[error(transparent)]
    OutOfRange(#[from] LimitError),
    #[error("config key `{key}` must be 0 (off) or between {min} and {max}, got {got}")]
    NotOffOrInRange {
        key: String,
        got: u64,
        min: u64,
        max: u64,
    },
    #[error("config key `{key}` {why}")]
    Invalid { key: String, why: String },
    #[error("cannot read {path}: {reason}")]
    File { path: PathBuf, reason: String },
}

/// Every key, in the order `pen/getConfig` shows them.
pub const KEYS: &[&str] = &[
    "max_tool_result_bytes",
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "context_window_tokens",
    "max_output_tokens",
    "reasoning_budget_tokens",
    "budget_margin_tokens",
    "budget_policy",
    "compaction_low_water_percent",
    "request_timeout_secs",
    "max_attempts",
    "max_turn_requests",
    "auto_approve",
    "mode",
    "prompt_cache_key",
    "mcp_servers",
    "checkpoint_store_bytes",
    "instruction_files",
    "instruction_bytes",
    "sandbox",
    "sandbox_network",
    "sandbox_writable_roots",
    "sandbox_env",
];

/// Which API a provider speaks: the one name for it in the config (`provider`), the provider
/// settings and the token estimate's framing. It lives here, below `providers` (which
/// re-exports it as `providers::ProviderKind`), so that the config does not depend on the
/// backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (OpenAI, Ollama, llama.cpp, vLLM…).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Amazon Bedrock Converse.
    Bedrock,
    /// Ollama's native `/api/chat`, which honours `options.num_ctx` (its OpenAI-compatible
    /// endpoint does not).
    Ollama,
}

impl ProviderKind {
    /// Every kind, in the order the config's error message lists them.
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Bedrock,
        ProviderKind::Ollama,
    ];

    /// The name the config and the wire use (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Ollama => "ollama",
        }
    }

    /// The kind a config names, if it is one.
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tools `auto_approve` may name: the ones that ask for approval.
pub static APPROVABLE_TOOLS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(crate::tools::registry::approvable_names);

/// pen's settings, always valid: integers within their bounds, `provider` a [`ProviderKind`]
/// (unset means "pick one", see [`crate::providers::choice`]), `auto_approve` a subset of
/// [`APPROVABLE_TOOLS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub max_tool_result_bytes: u64,
    pub provider: Option<ProviderKind>,
    pub model: Option<String>,
    pub base_url: Option<String>,
    /// The name of the environment variable that holds the API key (never the key itself).
    pub api_key_env: Option<String>,
    /// The model's context window as the user set it; `None` (the default) lets pen find it
    /// (see [`crate::providers::window`]).
    pub context_window_tokens: Option<u64>,
    pub max_output_tokens: u64,
    /// Extended thinking's budget (Anthropic, Bedrock); 0 is off.
    pub reasoning_budget_tokens: u64,
    pub budget_margin_tokens: u64,
    /// The prompt-budget policy version: 3 or 4 (see [`crate::limits::BUDGET_POLICY`]).
    pub budget_policy: u64,
    /// Policy 4's low-water mark, in % of the input budget.
    pub compaction_low_water_percent: u64,
    pub request_timeout_secs: u64,
    pub max_attempts: u64,
    pub max_turn_requests: u64,
    pub auto_approve: Vec<String>,
    /// The permission mode of a session that no front end switched (see [`crate::mode`]).
    pub mode: Mode,
    /// Whether OpenAI-compatible requests carry `prompt_cache_key` (the session id): `None`
    /// (`"auto"`) sends it to api.openai.com only, since other servers may refuse an unknown
    /// field; `Some(true)` (`"on"`) and `Some(false)` (`"off"`) decide for any server.
    pub prompt_cache_key: Option<bool>,
    /// The owner's MCP servers by name (SPEC §11).
    pub mcp_servers: std::collections::BTreeMap<String, McpServerConfig>,
    /// The bytes of pre-images one session's checkpoints may hold (SPEC §13).
    pub checkpoint_store_bytes: u64,
    /// The names of the project's instruction files, read in each folder in this order
    /// (`AGENTS.override.md` before `AGENTS.md`, as codex does).
    pub instruction_files: Vec<String>,
    /// The budget of the instruction files of a session, in bytes.
    pub instruction_bytes: u64,
    /// What pen_command's OS sandbox lets a command write (`crate::sandbox`).
    pub sandbox: crate::sandbox::Level,
    /// Whether a sandboxed command keeps the network.
    pub sandbox_network: bool,
    /// More folders a sandboxed command may write, as the owner wrote them (`~` is expanded
    /// when a command runs).
    pub sandbox_writable_roots: Vec<String>,
    /// Which of pen's environment variables a sandboxed command gets.
    pub sandbox_env: crate::sandbox::EnvPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_tool_result_bytes: MAX_TOOL_RESULT_BYTES.default,
            provider: None,
            model: None,
            base_url: None,
            api_key_env: None,
            context_window_tokens: None,
            max_output_tokens: MAX_OUTPUT_TOKENS.default,
            reasoning_budget_tokens: REASONING_BUDGET_TOKENS.default,
            budget_margin_tokens: BUDGET_MARGIN_TOKENS.default,
            budget_policy: BUDGET_POLICY.default,
            compaction_low_water_percent: COMPACTION_LOW_WATER_PERCENT.default,
            request_timeout_secs: REQUEST_TIMEOUT_SECS.default,
            max_attempts: MAX_ATTEMPTS.default,
            max_turn_requests: MAX_TURN_REQUESTS.default,
            auto_approve: Vec::new(),
            mode: Mode::Ask,
            prompt_cache_key: None,
            mcp_servers: std::collections::BTreeMap::new(),
            checkpoint_store_bytes: CHECKPOINT_STORE_BYTES.default,
            instruction_files: vec!["AGENTS.md".to_string()],
            instruction_bytes: INSTRUCTION_BYTES.default,
            sandbox: crate::sandbox::Level::WorkspaceWrite,
            sandbox_network: false,
            sandbox_writable_roots: Vec::new(),
            sandbox_env: crate::sandbox::EnvPolicy::All,
        }
    }
}

fn integer(key: &str, value: &Value, bounds: &Bounds) -> Result<u64, ConfigError> {
    let number = value
        .as_u64()
        .ok_or_else(|| wrong_type(key, "a whole number", value))?;
    Ok(bounds.check(number)?)
}

/// An integer key where 0 means "off" and any other value must lie within `bounds`.
fn off_or_integer(key: &str, value: &Value, bounds: &Bounds) -> Result<u64, ConfigError> {
    let number = value
        .as_u64()
        .ok_or_else(|| wrong_type(key, "a whole number", value))?;
    if number != 0 && bounds.check(number).is_err() {
        return Err(ConfigError::NotOffOrInRange {
            key: key.to_string(),
            got: number,
            min: bounds.min,
            max: bounds.max,
        });
    }
    Ok(number)
}

/// A text key of at most `max` bytes (after trimming); `null` or `""` unsets it. Every string a
/// config holds is bounded: it is sent on every provider request and shown by `pen/getConfig`.
fn text(key: &str, value: &Value, max: usize) -> Result<Option<String>, ConfigError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if s.trim().is_empty() => Ok(None),
        Value::String(s) if s.trim().len() > max => Err(ConfigError::TooLong {
            key: key.to_string(),
            len: s.trim().len(),
            max,
        }),
        Value::String(s) => Ok(Some(s.trim().to_string())),
        other => Err(wrong_type(key, "a string", other)),
    }
}

/// `instruction_files`: relative file names, each once, without `..` or an absolute path (a
/// name is looked up inside a workspace folder and must stay there).
fn instruction_names(key: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    use crate::limits::{MAX_INSTRUCTION_FILES, MAX_INSTRUCTION_NAME_BYTES};
    let items = value
        .as_array()
        .ok_or_else(|| wrong_type(key, "a list of file names", value))?;
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let Some(name) = text(key, item, MAX_INSTRUCTION_NAME_BYTES)? else {
            continue;
        };
        let path = Path::new(&name);
        let plain = !path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            return Err(ConfigError::Invalid {
                key: key.to_string(),
                why: format!(
                    "lists {}: a name must be a path relative to a folder, without `..`",
                    shown_value(&name)
                ),
            });
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.len() > MAX_INSTRUCTION_FILES {
        return Err(ConfigError::Invalid {
            key: key.to_string(),
            why: format!(
                "names {} files; at most {MAX_INSTRUCTION_FILES} are allowed",
                names.len()
            ),
        });
    }
    Ok(names)
}

/// The word of `known` nearest to `word` in spelling (the fewest letters added, removed,
/// changed or swapped), when it is near enough to be a typo of it: at most a third of its
/// letters differ, or `word` is its first five letters or more. What "did you mean …?" offers
/// for an unknown key.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word: Vec<char> = word.to_lowercase().chars().collect();
    // A key is short; a huge unknown key is nobody's typo.
    if word.len() > 64 {
        return None;
    }
    known
        .iter()
        .map(|candidate| (typo_distance(&word, candidate), *candidate))
        .filter(|(distance, candidate)| {
            *distance <= (candidate.chars().count() / 3).max(1)
                || (word.len() >= 5 && candidate.starts_with(&String::from_iter(&word)))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// The edit distance between `a` and `b` where swapping two neighbouring letters counts as one
/// edit (`modle` is one edit from `model`).
fn typo_distance(a: &[char], b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let change = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + change);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// ` (did you mean `KEY`?)` for a key [`nearest`] found, else nothing.
fn did_you_mean(nearest: &Option<&str>) -> String {
    nearest.map_or_else(String::new, |key| format!(" (did you mean `{key}`?)"))
}

/// A yes-or-no key: `true`/`false`, or their text (from an environment variable).
fn boolean(key: &str, value: &Value) -> Result<bool, ConfigError> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if matches!(s.trim(), "true" | "1") => Ok(true),
        Value::String(s) if matches!(s.trim(), "false" | "0") => Ok(false),
        other => Err(wrong_type(key, "true or false", other)),
    }
}

/// `sandbox_writable_roots`: absolute paths (or `~/…`), each once.
fn writable_roots(key: &str, value: &Value) -> Result<Vec<String>, ConfigError> {
    use crate::limits::{MAX_SANDBOX_PATH_BYTES, MAX_SANDBOX_WRITABLE_ROOTS};
    let items = value
        .as_array()
        .ok_or_else(|| wrong_type(key, "a list of folders", value))?;
    let mut roots: Vec<String> = Vec::new();
    for item in items {
        let Some(root) = text(key, item, MAX_SANDBOX_PATH_BYTES)? else {
            continue;
        };
        if !(root == "~" || root.starts_with("~/") || Path::new(&root).is_absolute()) {
            return Err(ConfigError::Invalid {
                key: key.to_string(),
                why: format!(
                    "lists {}: a folder must be an absolute path or start with `~/`",
                    shown_value(&root)
                ),
            });
        }
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    if roots.len() > MAX_SANDBOX_WRITABLE_ROOTS {
        return Err(ConfigError::Invalid {
            key: key.to_string(),
            why: format!(
                "names {} folders; at most {MAX_SANDBOX_WRITABLE_ROOTS} are allowed",
                roots.len()
            ),
        });
    }
    Ok(roots)
}

fn wrong_type(key: &str, expected: &'static str, got: &Value) -> ConfigError {
    ConfigError::WrongType {
        key: key.to_string(),
        expected,
        got: shown_value(&got.to_string()),
    }
}

/// A refused value as an error shows it: cut to [`MAX_CONFIG_SHOWN_VALUE_BYTES`], so that a
/// 10 MB value does not make a 10 MB error (or warning line).
fn shown_value(text: &str) -> String {
    crate::text::cut_with_note(
        text,
        MAX_CONFIG_SHOWN_VALUE_BYTES,
        format_args!("… ({} bytes)", text.len()),
    )
    .into_owned()
}

/// Whether an `auto_approve` entry names MCP tools: one tool, `mcp__<server>__<tool>` in the
/// characters tool names are made of, or a server's read-only tools, `mcp__<server>__*` with
/// a valid server name (matched by that server, never by the spelling of a tool's name, so no
/// other `*` form is taken).
fn is_mcp_pattern(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("mcp__") else {
        return false;
    };
    if name.contains('*') {
        return mcp::pattern_server(name).is_some();
    }
    rest.contains("__")
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn one_of(
    key: &str,
    value: Option<String>,
    allowed: &[&str],
) -> Result<Option<String>, ConfigError> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ConfigError::NotOneOf {
            key: key.to_string(),
            got: shown_value(&v),
            allowed: allowed.join(", "),
        }),
        other => Ok(other),
    }
}

impl Config {
    /// Sets one key from a JSON value, checking its type and bounds. On error the config is
    /// unchanged.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        match key {
            "max_tool_result_bytes" => {
                self.max_tool_result_bytes = integer(key, value, &MAX_TOOL_RESULT_BYTES)?
            }
            "checkpoint_store_bytes" => {
                self.checkpoint_store_bytes = integer(key, value, &CHECKPOINT_STORE_BYTES)?
            }
            // `null` unsets it, so pen finds the window again.
            "context_window_tokens" => {
                self.context_window_tokens = match value {
                    Value::Null => None,
                    value => Some(integer(key, value, &CONTEXT_WINDOW_TOKENS)?),
                }
            }
            "max_output_tokens" => {
                self.max_output_tokens = integer(key, value, &MAX_OUTPUT_TOKENS)?
            }
            "reasoning_budget_tokens" => {
                self.reasoning_budget_tokens = off_or_integer(key, value, &REASONING_BUDGET_TOKENS)?
            }
            "budget_margin_tokens" => {
                self.budget_margin_tokens = integer(key, value, &BUDGET_MARGIN_TOKENS)?
            }
            "budget_policy" => self.budget_policy = integer(key, value, &BUDGET_POLICY)?,
            "compaction_low_water_percent" => {
                self.compaction_low_water_percent =
                    integer(key, value, &COMPACTION_LOW_WATER_PERCENT)?
            }
            "request_timeout_secs" => {
                self.request_timeout_secs = integer(key, value, &REQUEST_TIMEOUT_SECS)?
            }
            "max_attempts" => self.max_attempts = integer(key, value, &MAX_ATTEMPTS)?,
            "max_turn_requests" => {
                self.max_turn_requests = integer(key, value, &MAX_TURN_REQUESTS)?
            }
            // A choice is bounded by its list of values; a refused one is shown cut.
            "provider" => {
                let names = ProviderKind::ALL.map(ProviderKind::as_str);
                let name = one_of(key, text(key, value, usize::MAX)?, &names)?;
                self.provider = name.as_deref().and_then(ProviderKind::from_name);
            }
            "model" => self.model = text(key, value, MAX_MODEL_BYTES)?,
            "base_url" => self.base_url = text(key, value, MAX_BASE_URL_BYTES)?,
            "api_key_env" => self.api_key_env = text(key, value, MAX_API_KEY_ENV_BYTES)?,
            "mode" => {
                let names = Mode::ALL.map(Mode::as_str);
                let name = one_of(key, text(key, value, usize::MAX)?, &names)?;
                self.mode = name
                    .as_deref()
                    .and_then(Mode::from_name)
                    .unwrap_or_default();
            }
            "prompt_cache_key" => {
                let choice = one_of(key, text(key, value, usize::MAX)?, &["auto", "on", "off"])?;
                self.prompt_cache_key = match choice.as_deref() {
                    Some("on") => Some(true),
                    Some("off") => Some(false),
                    _ => None,
                };
            }
            "auto_approve" => {
                let items = value
                    .as_array()
                    .ok_or_else(|| wrong_type(key, "a list of tool names", value))?;
                let mut tools: Vec<String> = Vec::new();
                for item in items {
                    let name = text(key, item, crate::limits::MAX_MCP_TOOL_NAME_BYTES)?;
                    // An MCP tool (`mcp__server__tool`) or a server's tools (`mcp__server__*`):
                    // its tools are known only once the server runs, so the form is checked.
                    let name = match name {
                        Some(n) if is_mcp_pattern(&n) => Some(n),
                        other => one_of(key, other, &APPROVABLE_TOOLS)?,
                    };
                    // Each tool once, so the list is never longer than APPROVABLE_TOOLS.
                    if let Some(name) = name
                        && !tools.contains(&name)
                    {
                        tools.push(name);
                    }
                }
                // Distinct names are bounded: the native ones and MCP names or patterns.
                let max = crate::limits::MAX_MCP_ENTRIES + APPROVABLE_TOOLS.len();
                if tools.len() > max {
                    return Err(ConfigError::Invalid {
                        key: key.to_string(),
                        why: format!("names {} tools; at most {max} are allowed", tools.len()),
                    });
                }
                self.auto_approve = tools;
            }
            "mcp_servers" => self.mcp_servers = mcp::parse_servers(key, value)?,
            "instruction_files" => self.instruction_files = instruction_names(key, value)?,
            "instruction_bytes" => {
                self.instruction_bytes = integer(key, value, &INSTRUCTION_BYTES)?
            }
            "sandbox" => {
                use crate::sandbox::Level;
                let names = Level::ALL.map(Level::as_str);
                let name = one_of(key, text(key, value, usize::MAX)?, &names)?;
                self.sandbox = name
                    .as_deref()
                    .and_then(Level::from_name)
                    .unwrap_or(Level::WorkspaceWrite);
            }
            "sandbox_network" => self.sandbox_network = boolean(key, value)?,
            "sandbox_writable_roots" => self.sandbox_writable_roots = writable_roots(key, value)?,
            "sandbox_env" => {
                use crate::sandbox::EnvPolicy;
                let names = EnvPolicy::ALL.map(EnvPolicy::as_str);
                let name = one_of(key, text(key, value, usize::MAX)?, &names)?;
                self.sandbox_env = name
                    .as_deref()
                    .and_then(EnvPolicy::from_name)
                    .unwrap_or(EnvPolicy::All);
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: shown_value(key),
                    nearest: nearest(key, KEYS),
                    known: KEYS.join(", "),
                });
            }
        }
        Ok(())
    }

    /// Sets every key of a JSON object, all or nothing.
    pub fn set_all(&mut self, values: &serde_json::Map<String, Value>) -> Result<(), ConfigError> {
        let mut next = self.clone();
        for (key, value) in values {
            next.set(key, value)?;
        }
        *self = next;
        Ok(())
    }

    /// Applies what can be applied of a boot-time source, returning one message per key that
    /// was refused (the default, or the earlier source's value, stays).
    pub fn apply_leniently(
        &mut self,
        source: &str,
        values: &serde_json::Map<String, Value>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        for (key, value) in values {
            if let Err(err) = self.set(key, value) {
                // A bad server is left out alone, named; the others run.
                if key == "mcp_servers"
                    && let Some((servers, refused)) = mcp::parse_each(key, value)
                {
                    self.mcp_servers = servers;
                    warnings.extend(
                        refused
                            .into_iter()
                            .map(|why| format!("{source}: {why}; that server is left out")),
                    );
                    continue;
                }
                warnings.push(format!(
                    "{source}: {err}; keeping {} = {}",
                    shown_value(key),
                    self.get(key)
                ));
            }
        }
        warnings
    }

    /// The value of a key as JSON (`null` for an unknown key).
    pub fn get(&self, key: &str) -> Value {
        self.to_json().get(key).cloned().unwrap_or(Value::Null)
    }

    /// Every key and its value.
    pub fn to_json(&self) -> Value {
        json!({
            "max_tool_result_bytes": self.max_tool_result_bytes,
            "provider": self.provider.map(ProviderKind::as_str),
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "context_window_tokens": self.context_window_tokens,
            "max_output_tokens": self.max_output_tokens,
            "reasoning_budget_tokens": self.reasoning_budget_tokens,
            "budget_margin_tokens": self.budget_margin_tokens,
            "budget_policy": self.budget_policy,
            "compaction_low_water_percent": self.compaction_low_water_percent,
            "request_timeout_secs": self.request_timeout_secs,
            "max_attempts": self.max_attempts,
            "max_turn_requests": self.max_turn_requests,
            "auto_approve": self.auto_approve,
            "mode": self.mode.as_str(),
            "prompt_cache_key": match self.prompt_cache_key {
                None => "auto",
                Some(true) => "on",
                Some(false) => "off",
            },
            "mcp_servers": mcp::to_json(&self.mcp_servers),
            "checkpoint_store_bytes": self.checkpoint_store_bytes,
            "instruction_files": self.instruction_files,
            "instruction_bytes": self.instruction_bytes,
            "sandbox": self.sandbox.as_str(),
            "sandbox_network": self.sandbox_network,
            "sandbox_writable_roots": self.sandbox_writable_roots,
            "sandbox_env": self.sandbox_env.as_str(),
        })
    }

    /// The OS sandbox of pen_command this config asks for, with pen's data folder
    /// `data_dir` kept read-only (probed once per process when on).
    pub fn command_sandbox(&self, data_dir: Option<PathBuf>) -> crate::sandbox::CommandSandbox {
        crate::sandbox::CommandSandbox::new(
            self.sandbox,
            self.sandbox_network,
            &self.sandbox_writable_roots,
            self.sandbox_env,
            data_dir,
        )
    }

    /// [`Config::command_sandbox`] with pen's data folder (`data_dir`), on a blocking thread
    /// (its first call in the process probes the kernel by running a process). A probe that
    /// panicked leaves the sandbox on and unavailable, so every command asks.
    pub async fn command_sandbox_probed(
        &self,
        data_dir: Option<PathBuf>,
    ) -> crate::sandbox::CommandSandbox {
        let config = self.clone();
        let level = self.sandbox;
        tokio::task::spawn_blocking(move || config.command_sandbox(data_dir))
            .await
            .unwrap_or_else(|e| crate::sandbox::CommandSandbox {
                level,
                support: Err(format!("the probe failed: {e}")),
                ..crate::sandbox::CommandSandbox::off()
            })
    }

    /// The tool limits this config implies: the cap's pages. A turn fits them to what its prompt
    /// budget holds as it starts (SPEC §3, `crate::agent::ToolHost::fit_pages`), and
    /// `crate::agent::catalog_limits` shows that fit for the catalog outside a turn.
    pub fn limits(&self) -> Limits {
        Limits {
            max_tool_result_bytes: self.max_tool_result_bytes as usize,
            ..Limits::default()
        }
    }

    /// The config at boot: defaults, then the config file, then `PEN_*` variables from `env`
    /// (`PEN_MAX_TOOL_RESULT_BYTES=131072`, `PEN_AUTO_APPROVE=pen_edit,pen_create`).
    /// Returns the config and a warning for each value that was refused.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> (Config, Vec<String>) {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        if let Some(path) = file {
            match read_file(path) {
                Ok(Some(values)) => {
                    warnings.extend(config.apply_leniently(&path.display().to_string(), &values));
                }
                Ok(None) => {}
                Err(err) => warnings.push(err.to_string()),
            }
        }
        let env_values: serde_json::Map<String, Value> = env
            .into_iter()
            .filter_map(|(name, text)| {
                let key = name.strip_prefix("PEN_")?.to_ascii_lowercase();
                KEYS.contains(&key.as_str()).then(|| {
                    // An unset window is still a number when set.
                    let current = match key.as_str() {
                        "context_window_tokens" => json!(0),
                        _ => config.get(&key),
                    };
                    let value = env_value(&current, text);
                    (key, value)
                })
            })
            .collect();
        warnings.extend(config.apply_leniently("environment", &env_values));
        (config, warnings)
    }
}

/// An environment variable's text as the JSON its key takes, judged by the key's current
/// value: numbers for integer keys, comma-separated lists for list keys, else text.
fn env_value(current: &Value, text: String) -> Value {
    match current {
        Value::Number(_) => text
            .trim()
            .parse::<u64>()
            .map_or(Value::String(text), Value::from),
        Value::Array(_) => Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        _ => Value::String(text),
    }
}

/// The default config file: `dirs::config_dir()/pen/config.toml`.
pub fn default_config_file() -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join("pen").join("config.toml"))
}

/// The config file at boot: `PEN_CONFIG`, else the default path.
pub fn config_file() -> Option<PathBuf> {
    std::env::var_os("PEN_CONFIG")
        .map(PathBuf::from)
        .or_else(default_config_file)
}

/// Reads a TOML config file into JSON values; a missing file is `None`. Only a regular file
/// of at most [`MAX_CONFIG_FILE_BYTES`] is read: `/dev/zero`, a FIFO or a directory is refused
/// at once instead of hanging or filling memory (the file is opened without blocking, so a FIFO
/// with no writer cannot stall the open either).
fn read_file(path: &Path) -> Result<Option<serde_json::Map<String, Value>>, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |reason: String| ConfigError::File {
        path: path.to_path_buf(),
        reason,
    };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(refuse(e.to_string())),
    };
    let metadata = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !metadata.is_file() {
        return Err(refuse(
            "it is not a regular file; point PEN_CONFIG at a TOML file".to_string(),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(e.to_string()))?;
    if bytes.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(refuse(format!(
            "it is larger than the {MAX_CONFIG_FILE_BYTES}-byte limit for a config file"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| refuse(format!("it is not UTF-8: {e}")))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let value = serde_json::to_value(table).map_err(|e| ConfigError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(value.as_object().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_checks_key_type_and_bounds() {
        let mut config = Config::default();
        config.set("max_tool_result_bytes", &json!(2048)).unwrap();
        assert_eq!(config.max_tool_result_bytes, 2048);
        let err = config.set("max_tool_result_bytes", &json!(10)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_tool_result_bytes = 10 is out of range: it must be between 1024 and 1048576"
        );
        let err = config
            .set("max_tool_result_bytes", &json!("big"))
            .unwrap_err();
        assert!(err.to_string().contains("must be a whole number"));
        let err = config.set("nope", &json!(1)).unwrap_err();
        assert!(
            err.to_string().contains("unknown config key `nope`;"),
            "{err}"
        );
        let err = config.set("modle", &json!("m")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown config key `modle` (did you mean `model`?); the keys are"),
            "{err}"
        );
        assert_eq!(config.max_tool_result_bytes, 2048);
    }

    #[test]
    fn text_choice_and_list_keys() {
        let mut config = Config::default();
        config.set("provider", &json!("anthropic")).unwrap();
        config.set("model", &json!(" claude-x ")).unwrap();
        assert_eq!(config.provider, Some(ProviderKind::Anthropic));
        assert_eq!(config.get("provider"), json!("anthropic"));
        assert_eq!(config.model.as_deref(), Some("claude-x"));
        let err = config.set("provider", &json!("gemini")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config key `provider` must be one of openai, anthropic, bedrock, ollama, got `gemini`"
        );
        config.set("model", &json!(null)).unwrap();
        assert_eq!(config.model, None);
        assert_eq!(config.get("mode"), json!("ask"));
        config.set("mode", &json!("auto")).unwrap();
        assert_eq!(config.mode, Mode::Auto);
        let err = config.set("mode", &json!("yolo")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config key `mode` must be one of plan, ask, edit, auto, got `yolo`"
        );
        config.set("mode", &json!(null)).unwrap();
        assert_eq!(config.mode, Mode::Ask);
        config
            .set("auto_approve", &json!(["pen_edit", "pen_create"]))
            .unwrap();
        assert_eq!(config.auto_approve, ["pen_edit", "pen_create"]);
        assert!(config.set("auto_approve", &json!(["pen_read"])).is_err());
        assert!(config.set("auto_approve", &json!("pen_edit")).is_err());
        // MCP tools: one tool by name, or one server's `mcp__<server>__*`; no other `*` form
        // (a prefix of tool names would match another server's tools too).
        let mcp = json!(["mcp__docs__search", "mcp__docs__*", "mcp__a_b__*"]);
        assert_eq!(config.clone().set("auto_approve", &mcp).map(|_| ()), Ok(()));
        for bad in ["mcp__docs__s*", "mcp__do*", "mcp__a__b__*", "mcp____*"] {
            assert!(
                config.clone().set("auto_approve", &json!([bad])).is_err(),
                "{bad}"
            );
        }
        let err = config.set("max_turn_requests", &json!(0)).unwrap_err();
        assert!(err.to_string().contains("between 1 and 1000"), "{err}");
        assert_eq!(
            config.get("auto_approve"),
            json!(["pen_edit", "pen_create"])
        );
    }

    #[test]
    fn a_typo_of_a_key_is_answered_with_the_key() {
        for (typo, key) in [
            ("modle", Some("model")),
            ("Model", Some("model")),
            ("base-url", Some("base_url")),
            ("baseurl", Some("base_url")),
            ("max_turn_request", Some("max_turn_requests")),
            ("api_key", Some("api_key_env")),
            ("instructions", Some("instruction_files")),
            ("x", None),
        ] {
            assert_eq!(nearest(typo, KEYS), key, "{typo}");
        }
        assert_eq!(nearest(&"m".repeat(10_000), KEYS), None);
    }

    #[test]
    fn the_reasoning_budget_is_off_or_within_its_bounds() {
        let mut config = Config::default();
        assert_eq!(config.get("reasoning_budget_tokens"), json!(0));
        config.set("reasoning_budget_tokens", &json!(1024)).unwrap();
        config
            .set("reasoning_budget_tokens", &json!(1_000_000))
            .unwrap();
        for bad in [json!(1), json!(1023), json!(1_000_001)] {
            let err = config.set("reasoning_budget_tokens", &bad).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "config key `reasoning_budget_tokens` must be 0 (off) or between 1024 and \
                     1000000, got {bad}"
                )
            );
        }
        assert!(
            config
                .set("reasoning_budget_tokens", &json!("lots"))
                .is_err()
        );
        assert_eq!(config.reasoning_budget_tokens, 1_000_000);
        config.set("reasoning_budget_tokens", &json!(0)).unwrap();
        assert_eq!(config.reasoning_budget_tokens, 0);
        let env = vec![(
            "PEN_REASONING_BUDGET_TOKENS".to_string(),
            "2048".to_string(),
        )];
        assert_eq!(Config::load(None, env).0.reasoning_budget_tokens, 2048);
    }

    #[test]
    fn environment_values_take_each_key_type() {
        let env = vec![
            ("PEN_PROVIDER".to_string(), "openai".to_string()),
            (
                "PEN_BASE_URL".to_string(),
                "http://127.0.0.1:11434/v1".to_string(),
            ),
            (
                "PEN_AUTO_APPROVE".to_string(),
                "pen_edit, pen_create".to_string(),
            ),
            ("PEN_CONTEXT_WINDOW_TOKENS".to_string(), "8192".to_string()),
            ("PEN_MODE".to_string(), "edit".to_string()),
            ("PEN_UNRELATED".to_string(), "x".to_string()),
        ];
        let (config, warnings) = Config::load(None, env);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.provider, Some(ProviderKind::OpenAi));
        assert_eq!(
            config.base_url.as_deref(),
            Some("http://127.0.0.1:11434/v1")
        );
        assert_eq!(config.auto_approve, ["pen_edit", "pen_create"]);
        assert_eq!(config.context_window_tokens, Some(8192));
        assert_eq!(config.mode, Mode::Edit);
    }

    #[test]
    fn sandbox_keys_from_the_file_and_the_environment() {
        use crate::sandbox::{EnvPolicy, Level};
        let mut config = Config::default();
        assert_eq!(config.sandbox, Level::WorkspaceWrite);
        assert!(!config.sandbox_network);
        config.set("sandbox", &json!("read-only")).unwrap();
        assert_eq!(config.get("sandbox"), json!("read-only"));
        let err = config.set("sandbox", &json!("strict")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config key `sandbox` must be one of workspace-write, read-only, off, got `strict`"
        );
        config
            .set(
                "sandbox_writable_roots",
                &json!(["~/.cache", "/opt/x", "/opt/x"]),
            )
            .unwrap();
        assert_eq!(config.sandbox_writable_roots, ["~/.cache", "/opt/x"]);
        let err = config
            .set("sandbox_writable_roots", &json!(["rel/x"]))
            .unwrap_err();
        assert!(err.to_string().contains("absolute path"), "{err}");
        assert!(config.set("sandbox_env", &json!("none")).is_err());
        let env = vec![
            ("PEN_SANDBOX".to_string(), "off".to_string()),
            ("PEN_SANDBOX_NETWORK".to_string(), "true".to_string()),
            (
                "PEN_SANDBOX_WRITABLE_ROOTS".to_string(),
                "/a, ~/b".to_string(),
            ),
            ("PEN_SANDBOX_ENV".to_string(), "core".to_string()),
        ];
        let (config, warnings) = Config::load(None, env);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.sandbox, Level::Off);
        assert!(config.sandbox_network);
        assert_eq!(config.sandbox_writable_roots, ["/a", "~/b"]);
        assert_eq!(config.sandbox_env, EnvPolicy::Core);
        let env = vec![("PEN_SANDBOX_NETWORK".to_string(), "maybe".to_string())];
        assert_eq!(Config::load(None, env).1.len(), 1);
    }

    #[test]
    fn set_all_is_all_or_nothing() {
        let mut config = Config::default();
        let values = json!({"max_tool_result_bytes": 4096, "bogus": 1});
        assert!(config.set_all(values.as_object().unwrap()).is_err());
        assert_eq!(config, Config::default());
    }

    #[test]
    fn boot_sources_layer_and_bad_values_keep_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "max_tool_result_bytes = 4096\n").unwrap();
        let (config, warnings) = Config::load(Some(&file), Vec::new());
        assert_eq!(config.max_tool_result_bytes, 4096);
        assert!(warnings.is_empty());

        let env = vec![("PEN_MAX_TOOL_RESULT_BYTES".to_string(), "8192".to_string())];
        let (config, _) = Config::load(Some(&file), env);
        assert_eq!(config.max_tool_result_bytes, 8192);

        let env = vec![("PEN_MAX_TOOL_RESULT_BYTES".to_string(), "5".to_string())];
        let (config, warnings) = Config::load(Some(&file), env);
        assert_eq!(config.max_tool_result_bytes, 4096);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("between 1024 and 1048576"),
            "{warnings:?}"
        );

        std::fs::write(&file, "max_tool_result_bytes = [").unwrap();
        let (config, warnings) = Config::load(Some(&file), Vec::new());
        assert_eq!(config, Config::default());
        assert!(warnings[0].contains("config.toml"), "{warnings:?}");

        let (config, warnings) = Config::load(Some(&dir.path().join("missing.toml")), Vec::new());
        assert_eq!(config, Config::default());
        assert!(warnings.is_empty());
    }

    #[test]
    fn every_string_value_is_bounded_and_the_error_names_the_key() {
        let mut config = Config::default();
        let huge = "m".repeat(10 * 1024 * 1024);
        for (key, max) in [
            ("model", MAX_MODEL_BYTES),
            ("base_url", MAX_BASE_URL_BYTES),
            ("api_key_env", MAX_API_KEY_ENV_BYTES),
        ] {
            config.set(key, &json!("x".repeat(max))).unwrap();
            let err = config.set(key, &json!("x".repeat(max + 1))).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "config key `{key}` is {} bytes long; its limit is {max} bytes",
                    max + 1
                )
            );
            let err = config.set(key, &json!(huge)).unwrap_err();
            assert!(err.to_string().contains(&format!("`{key}`")), "{err}");
            assert_eq!(config.get(key), json!("x".repeat(max)));
        }
        // A choice and a list are bounded by their values; a refused huge one is shown cut.
        for (key, value) in [
            ("provider", json!(huge)),
            ("auto_approve", json!([huge])),
            ("max_turn_requests", json!(huge)),
        ] {
            let err = config.set(key, &value).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{err}");
            assert!(err.len() < 400, "{} bytes", err.len());
        }
        let err = config.set(&huge, &json!(1)).unwrap_err().to_string();
        assert!(err.len() < 1_000, "{} bytes", err.len());
        let many: Vec<&str> = std::iter::repeat_n("pen_edit", 100_000).collect();
        config.set("auto_approve", &json!(many)).unwrap();
        assert_eq!(config.auto_approve, ["pen_edit"]);
    }

    #[test]
    fn config_files_are_read_with_a_size_bound_and_only_when_regular() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.toml");
        std::fs::write(
            &big,
            format!(
                "model = \"{}\"\n",
                "m".repeat(MAX_CONFIG_FILE_BYTES as usize)
            ),
        )
        .unwrap();
        let fifo = dir.path().join("fifo.toml");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for (path, wanted) in [
            (Path::new("/dev/zero"), "not a regular file"),
            (fifo.as_path(), "not a regular file"),
            (dir.path(), "not a regular file"),
            (big.as_path(), "larger than the 1048576-byte limit"),
        ] {
            let (config, warnings) = Config::load(Some(path), Vec::new());
            assert_eq!(config, Config::default(), "{path:?}");
            assert_eq!(warnings.len(), 1, "{path:?}: {warnings:?}");
            assert!(warnings[0].contains(wanted), "{path:?}: {warnings:?}");
            assert!(
                warnings[0].contains(&path.display().to_string()),
                "{warnings:?}"
            );
        }
    }
}
