//! Where a request asks the provider to cache its prefix: the breakpoints Anthropic
//! (`cache_control`) and Bedrock (`cachePoint`) take, planned once here for both, and the
//! tables of which models cache and from what length.
//!
//! Providers cache a prompt by its exact prefix, and Anthropic's and Bedrock's only up to an
//! explicit breakpoint. A request carries at most three (under the APIs' four,
//! [`PROMPT_CACHE_BREAKPOINTS_MAX`]), each only where the prefix up to it reaches the model's
//! minimum cacheable length by pen's token estimate (a shorter one is never cached, so a
//! breakpoint there only spends one of the four):
//! - the stable head: the tool definitions and the system prompt, the same on every request;
//! - the end of the previous request of the session, while that request is still a prefix of
//!   this one ([`CacheHints::previous_end`]): the provider looks for an earlier cache entry
//!   only about 20 blocks back from a breakpoint, and a tool round can add more than that;
//! - the end of this request, so the next request reads everything up to here.
//!
//! Breakpoints go on user-side blocks only (a prompt, a tool result): a request always ends
//! with one, and so does the previous request inside this one.

use super::{Message, ModelRequest};
use crate::limits::PROMPT_CACHE_BREAKPOINTS_MAX;

/// What a backend may use to make the provider's prompt cache hit. None of it changes what
/// the model reads, and all of it is the same for two requests planned from the same history
/// after the same previous request, so those serialize to the same bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheHints {
    /// A key stable for the whole session (its id): OpenAI's `prompt_cache_key`, which routes
    /// the session's requests to the same cache.
    pub key: Option<String>,
    /// How many leading messages of this request were the whole previous request of the
    /// session, when that request is a prefix of this one (`None`: no previous request known,
    /// or the history changed under it, as a compaction does).
    pub previous_end: Option<usize>,
    /// pen's token estimate of the request's parts (the planner's, calibrated), to size the
    /// prefixes; `None` (or sizes of another request) sizes them at four bytes a token.
    pub sizes: Option<PartSizes>,
}

/// The estimated tokens of a request's parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartSizes {
    /// The system prompt and the tool definitions.
    pub head: u64,
    /// Each message, in order.
    pub messages: Vec<u64>,
}

impl PartSizes {
    /// Four bytes a token, without framing: the sizes of a request that came with none.
    fn rough(request: &ModelRequest) -> PartSizes {
        let tokens = |bytes: usize| (bytes as u64).div_ceil(4);
        let tools: usize = request
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
            .sum();
        PartSizes {
            head: tokens(request.system.len() + tools),
            messages: request
                .messages
                .iter()
                .map(|message| match message {
                    Message::User { text } => tokens(text.len()),
                    Message::Assistant {
                        text, tool_calls, ..
                    } => tokens(
                        text.len()
                            + tool_calls
                                .iter()
                                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                                .sum::<usize>(),
                    ),
                    Message::ToolResult {
                        call_id, content, ..
                    } => tokens(call_id.len() + content.len()),
                })
                .collect(),
        }
    }
}

impl CacheHints {
    /// `Some(previous.len())` when `previous` is a prefix of `next`: the hint
    /// [`CacheHints::previous_end`] wants.
    pub fn previous_end(previous: &[Message], next: &[Message]) -> Option<usize> {
        (!previous.is_empty() && next.starts_with(previous)).then_some(previous.len())
    }

    /// The previous request's end known from the history alone, for a session whose previous
    /// request this process did not send: the messages before the last assistant message (the
    /// answer to that request), unless `replanned` (this request was compacted, trimmed or
    /// retried, so its messages are no longer an extension of the previous request's). Under
    /// policy 4 requests between compactions only append (a law of `budget`), so this is
    /// exactly what [`CacheHints::previous_end`] finds in the process that sent it.
    pub fn previous_end_from_history(next: &[Message], replanned: bool) -> Option<usize> {
        if replanned {
            return None;
        }
        next.iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .filter(|&end| end > 0)
    }
}

/// Where one request's breakpoints go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakpoints {
    /// After the stable head: on the system prompt, or on the last tool definition when there
    /// is no system prompt.
    pub head: bool,
    /// The messages whose last block gets a breakpoint, ascending.
    pub messages: Vec<usize>,
}

impl Breakpoints {
    /// How many breakpoints this is in all.
    pub fn count(&self) -> usize {
        usize::from(self.head) + self.messages.len()
    }

    /// Plans the breakpoints of `request` for a model that caches prefixes of at least
    /// `min_tokens`.
    pub fn plan(request: &ModelRequest, min_tokens: u64) -> Breakpoints {
        let rough;
        let sizes = match &request.cache.sizes {
            Some(sizes) if sizes.messages.len() == request.messages.len() => sizes,
            _ => {
                rough = PartSizes::rough(request);
                &rough
            }
        };
        let head_tokens = sizes.head;
        let has_head = !request.system.is_empty() || !request.tools.is_empty();
        let mut breakpoints = Breakpoints {
            head: has_head && head_tokens >= min_tokens,
            messages: Vec::new(),
        };
        let user_side = |index: usize| {
            matches!(
                request.messages.get(index),
                Some(Message::User { .. } | Message::ToolResult { .. })
            )
        };
        // The prefix up to the end of message `index`, inclusive.
        let mut prefix = Vec::with_capacity(request.messages.len());
        let mut tokens = head_tokens;
        for size in &sizes.messages {
            tokens = tokens.saturating_add(*size);
            prefix.push(tokens);
        }
        let len = request.messages.len();
        let mut candidates = Vec::with_capacity(2);
        if let Some(previous) = request.cache.previous_end
            && previous > 0
            && previous < len
        {
            candidates.push(previous - 1);
        }
        if len > 0 {
            candidates.push(len - 1);
        }
        for index in candidates {
            if user_side(index)
                && prefix[index] >= min_tokens
                && breakpoints.count() < PROMPT_CACHE_BREAKPOINTS_MAX
            {
                breakpoints.messages.push(index);
            }
        }
        breakpoints
    }
}

/// The minimum cacheable prompt length of an Anthropic model, in tokens: a prefix shorter
/// than this is never cached. From the table of
/// https://platform.claude.com/docs/en/build-with-claude/prompt-caching ("Cache limitations"):
/// 4,096 for Claude Opus 4.6, Opus 4.5 and Haiku 4.5; 2,048 for Haiku 3.5 and Haiku 3; 1,024
/// for the others (Sonnet 4.6, 4.5, 4, 3.7, Opus 4.1, 4). Matched on the model id, so the
/// Bedrock ids (`anthropic.claude-haiku-4-5-20251001-v1:0`, `us.anthropic…`) match too; an id
/// this table does not know gets 1,024.
const ANTHROPIC_MIN_CACHEABLE_TOKENS: &[(&str, u64)] = &[
    ("opus-4-6", 4096),
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("3-5-haiku", 2048),
    ("3-haiku", 2048),
];

/// The minimum for a model the table does not name.
const DEFAULT_MIN_CACHEABLE_TOKENS: u64 = 1024;

/// The minimum cacheable length of a Claude model (see [`ANTHROPIC_MIN_CACHEABLE_TOKENS`]).
pub fn anthropic_min_cacheable_tokens(model: &str) -> u64 {
    let model = model.to_ascii_lowercase();
    ANTHROPIC_MIN_CACHEABLE_TOKENS
        .iter()
        .find(|(pattern, _)| model.contains(pattern))
        .map_or(DEFAULT_MIN_CACHEABLE_TOKENS, |&(_, tokens)| tokens)
}

/// How a Bedrock model takes `cachePoint` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BedrockCaching {
    /// The minimum tokens of a prefix before a checkpoint.
    pub min_tokens: u64,
    /// Whether `toolConfig.tools` may hold a checkpoint (Claude's, not Nova's).
    pub tools: bool,
}

/// The Bedrock models with prompt caching, from "Supported models, Regions, and limits" of
/// https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html: Claude 3.7
/// Sonnet, 3.5 Haiku, Sonnet 4 / 4.5, Opus 4 / 4.1 / 4.5, Haiku 4.5 (checkpoints in `system`,
/// `messages` and `tools`), and Amazon Nova Micro, Lite, Pro and Premier (in `system` and
/// `messages` only). The minimum per checkpoint follows Anthropic's table for Claude and is
/// 1K for Nova. Claude 3.5 Sonnet v2 kept caching only for its preview customers, so it is not
/// here. Any other model gets no `cachePoint`: Bedrock refuses one it does not take ("extraneous
/// key [cachePoint] is not permitted", or "You invoked an unsupported model or your request did
/// not allow prompt caching").
const BEDROCK_CACHING_MODELS: &[(&str, bool)] = &[
    ("anthropic.claude-3-7-sonnet", true),
    ("anthropic.claude-3-5-haiku", true),
    ("anthropic.claude-sonnet-4", true),
    ("anthropic.claude-opus-4", true),
    ("anthropic.claude-haiku-4-5", true),
    ("amazon.nova-micro", false),
    ("amazon.nova-lite", false),
    ("amazon.nova-pro", false),
    ("amazon.nova-premier", false),
];

/// Whether and how the Bedrock model `model` (an id, an inference profile such as
/// `us.anthropic…`, or an ARN naming one) takes `cachePoint` blocks.
pub fn bedrock_caching(model: &str) -> Option<BedrockCaching> {
    let model = model.to_ascii_lowercase();
    BEDROCK_CACHING_MODELS
        .iter()
        .find(|(pattern, _)| model.contains(pattern))
        .map(|&(pattern, tools)| BedrockCaching {
            min_tokens: if pattern.starts_with("anthropic.") {
                anthropic_min_cacheable_tokens(&model)
            } else {
                DEFAULT_MIN_CACHEABLE_TOKENS
            },
            tools,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ToolCall, ToolDefinition};

    fn request(messages: Vec<Message>, previous_end: Option<usize>) -> ModelRequest {
        ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: "s".repeat(2000),
            messages,
            tools: vec![ToolDefinition {
                name: "pen_read".into(),
                description: "Read a file.".into(),
                input_schema: serde_json::json!({"type": "object"}),
            }],
            max_output_tokens: 100,
            cache: CacheHints {
                previous_end,
                ..CacheHints::default()
            },
        }
    }

    fn round(id: &str, bytes: usize) -> [Message; 2] {
        [
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: id.into(),
                    name: "pen_read".into(),
                    arguments: "{}".into(),
                }],
                reasoning: vec![],
            },
            Message::ToolResult {
                call_id: id.into(),
                content: "r".repeat(bytes),
                is_error: false,
            },
        ]
    }

    #[test]
    fn breakpoints_go_where_the_prefix_is_long_enough_and_on_user_side_blocks_only() {
        let prompt = Message::User { text: "go".into() };
        let mut messages = vec![prompt];
        messages.extend(round("a", 8000));
        messages.extend(round("b", 8000));
        // The head is ~500 tokens: under the 1,024 minimum, so not marked; the previous end
        // (after `a`'s result) and the end are.
        let planned = Breakpoints::plan(&request(messages.clone(), Some(3)), 1024);
        assert_eq!(
            planned,
            Breakpoints {
                head: false,
                messages: vec![2, 4]
            }
        );
        let long_head = Breakpoints::plan(&request(messages.clone(), Some(3)), 400);
        assert_eq!(long_head.count(), 3);
        assert!(long_head.head);
        // Haiku 4.5's 4,096: only the whole request is long enough.
        let haiku = Breakpoints::plan(&request(messages.clone(), Some(3)), 4096);
        assert_eq!(haiku.messages, vec![4]);
        // No previous request known (or not a prefix any more): only the end.
        let fresh = Breakpoints::plan(&request(messages.clone(), None), 1024);
        assert_eq!(fresh.messages, vec![4]);
        // A previous end that is the whole request is the end itself, once.
        let same = Breakpoints::plan(&request(messages, Some(5)), 1024);
        assert_eq!(same.messages, vec![4]);
    }

    #[test]
    fn previous_end_is_known_only_while_the_previous_request_is_a_prefix() {
        let prompt = Message::User { text: "go".into() };
        let [call, result] = round("a", 10);
        let previous = vec![prompt.clone()];
        let next = vec![prompt.clone(), call.clone(), result.clone()];
        assert_eq!(CacheHints::previous_end(&previous, &next), Some(1));
        // A compaction rewrote the history under it.
        let compacted = vec![
            Message::User {
                text: "go (excerpted)".into(),
            },
            call,
            result,
        ];
        assert_eq!(CacheHints::previous_end(&previous, &compacted), None);
        assert_eq!(CacheHints::previous_end(&[], &next), None);
    }

    #[test]
    fn the_model_tables_name_their_minimums() {
        assert_eq!(
            anthropic_min_cacheable_tokens("claude-sonnet-4-5-20250929"),
            1024
        );
        assert_eq!(
            anthropic_min_cacheable_tokens("claude-opus-4-5-20251101"),
            4096
        );
        assert_eq!(anthropic_min_cacheable_tokens("claude-haiku-4-5"), 4096);
        assert_eq!(
            anthropic_min_cacheable_tokens("claude-3-5-haiku-20241022"),
            2048
        );
        assert_eq!(
            anthropic_min_cacheable_tokens("claude-3-haiku-20240307"),
            2048
        );
        assert_eq!(anthropic_min_cacheable_tokens("claude-opus-4-1"), 1024);
        assert_eq!(
            bedrock_caching("us.anthropic.claude-haiku-4-5-20251001-v1:0"),
            Some(BedrockCaching {
                min_tokens: 4096,
                tools: true
            })
        );
        assert_eq!(
            bedrock_caching("anthropic.claude-3-7-sonnet-20250219-v1:0"),
            Some(BedrockCaching {
                min_tokens: 1024,
                tools: true
            })
        );
        assert_eq!(
            bedrock_caching("amazon.nova-pro-v1:0"),
            Some(BedrockCaching {
                min_tokens: 1024,
                tools: false
            })
        );
        assert_eq!(bedrock_caching("meta.llama3-70b-instruct-v1:0"), None);
        assert_eq!(
            bedrock_caching("anthropic.claude-3-5-sonnet-20240620-v1:0"),
            None
        );
        assert_eq!(bedrock_caching("mistral.mistral-large-2402-v1:0"), None);
    }
}
