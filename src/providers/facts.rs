//! What pen knows of each provider API, one row per [`ProviderKind`]: its default endpoint, the
//! environment variable its key is read from, its default model, how its messages are framed
//! (for the token estimate) and how its context window is found.
//!
//! The backends, the provider choice, the window discovery and the token estimate read these
//! rows instead of matching on the kind, and the editors' provider settings (VS Code's
//! `pen.provider` list, Neovim's `pen.providers` table and help) are generated from them
//! (`protocol::codegen`). Adding a provider is adding its kind, its row and its backend.

use super::ProviderKind;

/// How a provider's API frames messages and tool calls, which sets the token estimate's
/// per-message and per-call overheads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// OpenAI's chat format (also Ollama's): role and separators around each message.
    Chat,
    /// Anthropic's content blocks (also Bedrock's Converse): a little more per message and call.
    ContentBlocks,
}

impl Framing {
    /// Every framing, in the order of [`Framing::index`].
    pub const ALL: [Framing; 2] = [Framing::Chat, Framing::ContentBlocks];

    /// This framing's place in [`Framing::ALL`].
    pub fn index(self) -> usize {
        match self {
            Framing::Chat => 0,
            Framing::ContentBlocks => 1,
        }
    }

    /// Framing tokens per message: OpenAI's chat format spends about 4 on role and separators;
    /// Anthropic's and Bedrock's content blocks a little more.
    pub fn message_overhead(self) -> u64 {
        match self {
            Framing::Chat => 4,
            Framing::ContentBlocks => 5,
        }
    }

    /// Framing tokens per tool call or result block (ids, names, type tags).
    pub fn tool_overhead(self) -> u64 {
        match self {
            Framing::Chat => 8,
            Framing::ContentBlocks => 10,
        }
    }
}

/// Where the context window of a provider's model is found when the config sets none
/// (`providers::window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    /// With a `base_url`, the server is asked (llama.cpp `/props`, vLLM and LM Studio model
    /// lists, Ollama `/api/show`); else, and when none answers, the hosted-model table.
    ServerThenTable,
    /// Ollama's `/api/show` at the `base_url` or the default endpoint: the trained window, which
    /// pen's `num_ctx` asks for. A local model has no row in the hosted-model table.
    OllamaShow,
    /// The hosted-model table only: the API has no discovery endpoint, even behind a proxy.
    HostedTable,
}

/// One provider's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderFacts {
    pub kind: ProviderKind,
    /// What the editors' settings say the provider is.
    pub title: &'static str,
    /// Where requests go when no `base_url` is configured; Bedrock's names its `{region}`.
    pub default_base_url: &'static str,
    /// The environment variable the key is read from when `api_key_env` names none; `None`
    /// when the provider takes no key (Ollama) or has credentials of its own (Bedrock: AWS's).
    pub key_variable: Option<&'static str>,
    /// The model used when the config names none; `None` when pen cannot guess one (Bedrock),
    /// or asks the server (Ollama: its first installed model).
    pub default_model: Option<&'static str>,
    pub framing: Framing,
    pub discovery: Discovery,
}

/// The rows, in the order of [`ProviderKind::ALL`].
const FACTS: [ProviderFacts; 4] = [
    ProviderFacts {
        kind: ProviderKind::OpenAi,
        title: "OpenAI Chat Completions, or any OpenAI-compatible server (llama.cpp, vLLM, LM Studio, Ollama's /v1)",
        default_base_url: "https://api.openai.com/v1",
        key_variable: Some("OPENAI_API_KEY"),
        default_model: Some("gpt-4.1-mini"),
        framing: Framing::Chat,
        discovery: Discovery::ServerThenTable,
    },
    ProviderFacts {
        kind: ProviderKind::Anthropic,
        title: "Anthropic Messages",
        default_base_url: "https://api.anthropic.com",
        key_variable: Some("ANTHROPIC_API_KEY"),
        default_model: Some("claude-sonnet-4-5"),
        framing: Framing::ContentBlocks,
        discovery: Discovery::HostedTable,
    },
    ProviderFacts {
        kind: ProviderKind::Bedrock,
        title: "Amazon Bedrock Converse (AWS credentials and region from the environment)",
        default_base_url: "https://bedrock-runtime.{region}.amazonaws.com",
        key_variable: None,
        default_model: None,
        framing: Framing::ContentBlocks,
        discovery: Discovery::HostedTable,
    },
    ProviderFacts {
        kind: ProviderKind::Ollama,
        title: "Ollama's native API (sizes the context window of every request)",
        default_base_url: "http://127.0.0.1:11434",
        key_variable: None,
        default_model: None,
        framing: Framing::Chat,
        discovery: Discovery::OllamaShow,
    },
];

impl ProviderKind {
    /// This provider's row of the facts table.
    pub fn facts(self) -> &'static ProviderFacts {
        let index = match self {
            ProviderKind::OpenAi => 0,
            ProviderKind::Anthropic => 1,
            ProviderKind::Bedrock => 2,
            ProviderKind::Ollama => 3,
        };
        &FACTS[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_row_in_order() {
        for (row, kind) in FACTS.iter().zip(ProviderKind::ALL) {
            assert_eq!(row.kind, kind);
            assert_eq!(kind.facts().kind, kind);
        }
        assert_eq!(FACTS.len(), ProviderKind::ALL.len());
        for framing in Framing::ALL {
            assert_eq!(Framing::ALL[framing.index()], framing);
        }
    }
}
