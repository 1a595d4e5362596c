//! Token estimates from bytes, calibrated by the provider's reported usage, and the budget they
//! are compared with.
//!
//! The estimate is deliberately simple and deterministic: an ASCII byte counts a quarter of a
//! token (English text and code average about four bytes a token in every family's tokenizer),
//! a non-ASCII byte half a token (a CJK character is three bytes and usually one or two
//! tokens), and every message and tool call a fixed overhead for its role and framing. The
//! caller corrects the systematic error with `ratio` = reported prompt tokens ÷ estimated.

use crate::limits::{TOKEN_RATIO_MAX, TOKEN_RATIO_MIN};
use crate::providers::{Message, ProviderKind, ToolDefinition};
use serde::{Deserialize, Serialize};

/// The input tokens one request may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub max_input_tokens: u64,
}

impl Budget {
    /// The context window less the reserved output and a safety margin (zero if they exceed it).
    pub fn new(context_window_tokens: u64, max_output_tokens: u64, margin_tokens: u64) -> Budget {
        Budget {
            max_input_tokens: context_window_tokens
                .saturating_sub(max_output_tokens)
                .saturating_sub(margin_tokens),
        }
    }

    /// What the budget leaves for a request's messages after the system prompt `system` and the
    /// tool schemas `tools`, at the estimator's ratio: the room the turn's pages are fitted to
    /// (`Limits::fitted_to_room`).
    pub fn room(&self, system: &str, tools: &[ToolDefinition], estimator: &TokenEstimator) -> u64 {
        self.max_input_tokens
            .saturating_sub(estimator.text(system))
            .saturating_sub(estimator.tools(tools))
    }

    /// The budget after the provider rejected a request estimated at `rejected_tokens` as over
    /// its window: later requests are planned strictly under that estimate, whatever the
    /// configured window claims.
    pub fn below_rejection(self, rejected_tokens: u64) -> Budget {
        Budget {
            max_input_tokens: self.max_input_tokens.min(rejected_tokens.saturating_sub(1)),
        }
    }
}

impl ProviderKind {
    /// One family of each framing, in the order of [`Framing::ALL`](crate::providers::facts::Framing::ALL) (the families whose
    /// overheads are the same share one).
    pub(super) const FRAMINGS: [ProviderKind; 2] = [ProviderKind::OpenAi, ProviderKind::Anthropic];

    /// The index of this family's framing in [`ProviderKind::FRAMINGS`].
    pub(super) fn framing(self) -> usize {
        self.facts().framing.index()
    }

    /// Framing tokens per message (see [`crate::providers::facts::Framing::message_overhead`]).
    fn message_overhead(self) -> u64 {
        self.facts().framing.message_overhead()
    }

    /// Framing tokens per tool call or result block (see [`crate::providers::facts::Framing::tool_overhead`]).
    fn tool_overhead(self) -> u64 {
        self.facts().framing.tool_overhead()
    }
}

/// The largest total of the sizes [`TokenEstimator::scale_sum`] takes (its sums of ceilings
/// stay integers below 2^53).
pub(super) const SUM_TOTAL_LIMIT: u64 = 1 << 51;

/// The size of a text in quarter tokens: 1 per ASCII byte, 2 per other byte. Additive: the
/// size of a concatenation is the sum of the sizes of its parts.
pub(super) fn quarter_tokens(text: &[u8]) -> u64 {
    // `is_ascii` checks a word at a time; most text takes only that pass.
    let non_ascii = if text.is_ascii() {
        0
    } else {
        text.iter().filter(|b| !b.is_ascii()).count() as u64
    };
    let ascii = text.len() as u64 - non_ascii;
    ascii + 2 * non_ascii
}

/// A deterministic token estimate for one provider family.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenEstimator {
    pub family: ProviderKind,
    /// Reported ÷ estimated prompt tokens, clamped to `TOKEN_RATIO_MIN..=TOKEN_RATIO_MAX`.
    pub ratio: f64,
}

impl TokenEstimator {
    /// An estimator with `ratio` clamped to the sane range; a ratio that is not a finite
    /// number (no usage seen yet, a division by zero) counts as 1.
    pub fn new(family: ProviderKind, ratio: f64) -> TokenEstimator {
        let ratio = if ratio.is_finite() {
            ratio.clamp(TOKEN_RATIO_MIN, TOKEN_RATIO_MAX)
        } else {
            1.0
        };
        TokenEstimator { family, ratio }
    }

    /// The calibration ratio for one request: the prompt tokens the provider reported over the
    /// tokens estimated for it (with a ratio of 1), clamped as [`TokenEstimator::new`] does.
    pub fn calibrate(
        family: ProviderKind,
        reported_tokens: u64,
        estimated_tokens: u64,
    ) -> TokenEstimator {
        if estimated_tokens == 0 {
            return TokenEstimator::new(family, 1.0);
        }
        TokenEstimator::new(family, reported_tokens as f64 / estimated_tokens as f64)
    }

    pub(super) fn scale(&self, raw_quarter_tokens: u64) -> u64 {
        // Quarter tokens keep the byte arithmetic integral; the ratio is applied once, rounded
        // up, so an estimate never rounds a non-empty text down to nothing.
        //
        // The planner scales every message of the session for each request, and on the
        // baseline x86-64 target `f64::ceil` is a library call and u64 ⇄ f64 conversions are
        // instruction sequences. Below 2^53 quarter tokens (always, in practice) the same
        // ceiling is two signed conversions and a compare: `i64 as f64` is then exact, as
        // `u64 as f64` is, and at 2^53 and above every f64 is an integer already.
        if raw_quarter_tokens < 1 << 53 {
            let tokens = raw_quarter_tokens as i64 as f64 * self.ratio / 4.0;
            // Also false for a NaN (from a ratio set by hand), which the slow path maps to 0.
            if (0.0..(1u64 << 62) as f64).contains(&tokens) {
                let truncated = tokens as i64;
                return (truncated + i64::from((truncated as f64) < tokens)) as u64;
            }
        }
        self.scale_exactly(raw_quarter_tokens)
    }

    #[cold]
    fn scale_exactly(&self, raw_quarter_tokens: u64) -> u64 {
        (raw_quarter_tokens as f64 * self.ratio / 4.0).ceil() as u64
    }

    /// The sum of [`TokenEstimator::scale`] over many sizes (their total below
    /// [`SUM_TOTAL_LIMIT`]); `None` for a ratio set by hand outside `0..=4`, which the caller
    /// sums one by one.
    ///
    /// The planner sums every message of the session for each request, so this is written
    /// for the vector unit (and for memory: 4 bytes a message): four lanes of f64 adds, and a
    /// ceiling without float-to-integer conversions (adding and taking away 2^52 rounds a
    /// value below 2^51 to the nearest integer). It gives exactly what `scale` gives: a u32 is
    /// an f64 exactly, `size × (ratio × ¼)` is `size × ratio ÷ 4` bit for bit (a power-of-two
    /// factor never rounds), every product is below 2^32, and every partial sum is an integer
    /// below 2^53.
    pub(super) fn scale_sum(&self, sizes: &[u32]) -> Option<u64> {
        const TWO_52: f64 = (1u64 << 52) as f64;
        if !(1e-300..=4.0).contains(&self.ratio) {
            return None;
        }
        let quarter_ratio = self.ratio * 0.25;
        let ceil = |size: u32| {
            let tokens = f64::from(size) * quarter_ratio;
            let nearest = (tokens + TWO_52) - TWO_52;
            nearest + if nearest < tokens { 1.0 } else { 0.0 }
        };
        let mut lanes = [0.0f64; 4];
        let chunks = sizes.chunks_exact(4);
        let rest = chunks.remainder();
        for chunk in chunks {
            for (lane, &size) in lanes.iter_mut().zip(chunk) {
                *lane += ceil(size);
            }
        }
        let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
        for &size in rest {
            sum += ceil(size);
        }
        Some(sum as u64)
    }

    fn quarter_tokens(text: &str) -> u64 {
        quarter_tokens(text.as_bytes())
    }

    /// A message's size in quarter tokens from its unframed size (`raw`, the quarter tokens of
    /// its texts) and how many tool call or result blocks it frames: what
    /// [`TokenEstimator::quarters`] gives for the message, without its text.
    pub(super) fn framed(&self, raw: u64, tool_blocks: u64) -> u64 {
        raw + 4 * self.family.message_overhead() + 4 * self.family.tool_overhead() * tool_blocks
    }

    /// The estimated tokens of a bare text (the system prompt).
    pub fn text(&self, text: &str) -> u64 {
        self.scale(Self::quarter_tokens(text))
    }

    /// The estimated tokens of one message, with its framing.
    pub fn message(&self, message: &Message) -> u64 {
        self.scale(self.quarters(message))
    }

    /// A message's size in quarter tokens before the ratio: one scan of its text, which
    /// [`TokenEstimator::scale`] turns into tokens at any ratio.
    pub(super) fn quarters(&self, message: &Message) -> u64 {
        match message {
            Message::User { text } => self.message_quarters(text),
            Message::Assistant {
                text, tool_calls, ..
            } => self.assistant_quarters(
                text,
                tool_calls
                    .iter()
                    .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())),
            ),
            Message::ToolResult {
                call_id, content, ..
            } => self.result_quarters(call_id, content),
        }
    }

    fn message_quarters(&self, text: &str) -> u64 {
        4 * self.family.message_overhead() + Self::quarter_tokens(text)
    }

    /// An assistant message, estimated from its parts (each call's id, name and arguments) so
    /// the planner need not build it. (The reference planner's; the planner keeps sizes.)
    #[cfg(test)]
    pub(super) fn assistant<'a>(
        &self,
        text: &str,
        tool_calls: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> u64 {
        self.scale(self.assistant_quarters(text, tool_calls))
    }

    fn assistant_quarters<'a>(
        &self,
        text: &str,
        tool_calls: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> u64 {
        let calls: u64 = tool_calls
            .into_iter()
            .map(|(id, name, arguments)| {
                4 * self.family.tool_overhead()
                    + Self::quarter_tokens(id)
                    + Self::quarter_tokens(name)
                    + Self::quarter_tokens(arguments)
            })
            .sum();
        self.message_quarters(text) + calls
    }

    /// A tool result, estimated from its parts. (The reference planner's.)
    #[cfg(test)]
    pub(super) fn tool_result(&self, call_id: &str, content: &str) -> u64 {
        self.scale(self.result_quarters(call_id, content))
    }

    fn result_quarters(&self, call_id: &str, content: &str) -> u64 {
        4 * self.family.tool_overhead()
            + self.message_quarters(call_id)
            + Self::quarter_tokens(content)
    }

    /// The estimated input tokens of a whole request, as [`crate::budget::plan`] counts them.
    pub fn request(&self, system: &str, tools: &[ToolDefinition], messages: &[Message]) -> u64 {
        self.text(system)
            + self.tools(tools)
            + messages.iter().map(|m| self.message(m)).sum::<u64>()
    }

    /// The estimated tokens of the tool definitions, as their JSON.
    pub fn tools(&self, tools: &[ToolDefinition]) -> u64 {
        let quarters: u64 = tools
            .iter()
            .map(|t| {
                4 * self.family.tool_overhead()
                    + Self::quarter_tokens(&t.name)
                    + Self::quarter_tokens(&t.description)
                    + Self::quarter_tokens(&t.input_schema.to_string())
            })
            .sum();
        self.scale(quarters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::facts::Framing;

    #[test]
    fn each_framing_family_stands_for_its_framing() {
        for (family, framing) in ProviderKind::FRAMINGS.into_iter().zip(Framing::ALL) {
            assert_eq!(family.facts().framing, framing);
        }
    }
}
