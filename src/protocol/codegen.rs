//! The editors' protocol definitions, generated from the Rust types and checked against the
//! committed files: `editors/vscode/src/protocol.generated.ts` (every params, result and event
//! type, by `ts-rs`) and `editors/neovim/lua/pen/protocol.lua` (the method names and enum
//! values). A test fails, with the diff and the command that updates them, when they drift.
//!
//! Like rust-analyzer's `lsp_ext` check, the files are regenerated in memory; only
//! `PEN_UPDATE_GENERATED=1` writes them.

use super::*;
use crate::agent::EventKind;
use std::fmt::Write as _;
use std::path::Path;
use ts_rs::{Config, TS};

/// The command that rewrites the generated files.
const UPDATE_COMMAND: &str = "PEN_UPDATE_GENERATED=1 cargo test --lib protocol::codegen";
const TS_PATH: &str = "editors/vscode/src/protocol.generated.ts";
const LUA_PATH: &str = "editors/neovim/lua/pen/protocol.lua";

/// A JSON value: what `serde_json::Value` fields carry (tool arguments, unknown events).
const JSON_VALUE: &str = "export type JsonValue = number | string | boolean | Array<JsonValue> | \
                          { [key in string]?: JsonValue } | null;";

fn decl<T: TS>(cfg: &Config, out: &mut String) {
    if let Some(docs) = T::docs() {
        out.push_str(&docs);
    }
    // `decl` gives `type X = …;`; the extension imports them.
    let _ = writeln!(out, "export {}\n", T::decl(cfg));
}

/// `SNAKE_CASE` for a snake_case wire name: the key of its constant.
fn constant(name: &str) -> String {
    name.to_ascii_uppercase()
}

fn string_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The enums both editors take their names from: (TypeScript / Lua name, values).
fn enums() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    vec![
        (
            "STOP_REASONS",
            "stop_reason",
            StopReason::ALL.iter().map(|r| r.as_str()).collect(),
        ),
        (
            "TURN_ERROR_KINDS",
            "error_kind",
            TurnErrorKind::ALL.iter().map(|k| k.as_str()).collect(),
        ),
        (
            "CALL_OUTCOMES",
            "call_outcome",
            CallOutcome::ALL.iter().map(|o| o.as_str()).collect(),
        ),
        (
            "EVENT_KINDS",
            "event_kind",
            EventKind::ALL.iter().map(|k| k.as_str()).collect(),
        ),
        ("ENTRY_KINDS", "entry_kind", EntryBody::KINDS.to_vec()),
        ("TRIM_REASONS", "trim_reason", TrimmedData::REASONS.to_vec()),
        (
            "DECISIONS",
            "decision",
            Decision::ALL
                .iter()
                .map(|d| match d {
                    Decision::Allow => "allow",
                    Decision::AllowForSession => "allow_for_session",
                    Decision::Deny => "deny",
                })
                .collect(),
        ),
    ]
}

fn typescript() -> String {
    // JavaScript numbers hold every count and timestamp pen sends (all below 2^53).
    let cfg = Config::new().with_large_int("number");
    let mut out = format!(
        "//! Generated from pen's Rust protocol types (src/protocol.rs) by ts-rs; do not edit.\n\
         //! Update: {UPDATE_COMMAND}\n\n{JSON_VALUE}\n\n"
    );
    out.push_str("/** The `pen/…` methods. */\nexport const METHODS = {\n");
    for (name, method) in methods::ALL {
        let _ = writeln!(out, "  {name}: '{method}',");
    }
    out.push_str("} as const;\n\n");
    for (ts_name, _, values) in enums() {
        let _ = writeln!(
            out,
            "export const {ts_name} = [{}] as const;\n",
            string_list(&values)
        );
    }
    decl::<CallOutcome>(&cfg, &mut out);
    decl::<StopReason>(&cfg, &mut out);
    decl::<TurnErrorKind>(&cfg, &mut out);
    decl::<Decision>(&cfg, &mut out);
    decl::<FinishReason>(&cfg, &mut out);
    decl::<CallToolParams>(&cfg, &mut out);
    decl::<NewSessionParams>(&cfg, &mut out);
    decl::<ListSessionsParams>(&cfg, &mut out);
    decl::<SessionSummary>(&cfg, &mut out);
    decl::<ListSessionsResponse>(&cfg, &mut out);
    decl::<GetTranscriptParams>(&cfg, &mut out);
    decl::<TranscriptResponse>(&cfg, &mut out);
    decl::<RevertTurnParams>(&cfg, &mut out);
    decl::<RevertedFileReport>(&cfg, &mut out);
    decl::<UnrevertedCall>(&cfg, &mut out);
    decl::<InterruptedRevertReport>(&cfg, &mut out);
    decl::<RevertTurnResult>(&cfg, &mut out);
    decl::<ForkSessionParams>(&cfg, &mut out);
    decl::<ForkSessionResult>(&cfg, &mut out);
    decl::<TranscriptRecord>(&cfg, &mut out);
    decl::<EntryBody>(&cfg, &mut out);
    decl::<AssistantCall>(&cfg, &mut out);
    decl::<Usage>(&cfg, &mut out);
    decl::<PromptParams>(&cfg, &mut out);
    decl::<PromptContext>(&cfg, &mut out);
    decl::<PromptSelection>(&cfg, &mut out);
    decl::<LineRange>(&cfg, &mut out);
    decl::<GetSessionContextParams>(&cfg, &mut out);
    decl::<SessionContextResponse>(&cfg, &mut out);
    decl::<InstructionFileInfo>(&cfg, &mut out);
    decl::<PromptResponse>(&cfg, &mut out);
    decl::<TurnOutcome>(&cfg, &mut out);
    decl::<UsageData>(&cfg, &mut out);
    decl::<StopParams>(&cfg, &mut out);
    decl::<StopResponse>(&cfg, &mut out);
    decl::<EventParams>(&cfg, &mut out);
    decl::<EventBody>(&cfg, &mut out);
    decl::<TrimmedData>(&cfg, &mut out);
    decl::<ApprovalParams>(&cfg, &mut out);
    decl::<ApprovalResponse>(&cfg, &mut out);
    out.push_str(
        "/** The kind of a `pen/event`. */\nexport type EventKind = EventBody['kind'];\n\n\
         /** The kind of a `pen/getTranscript` entry. */\nexport type EntryKind = EntryBody['kind'];\n",
    );
    out
}

fn lua() -> String {
    let mut out = format!(
        "--- pen's protocol names, generated from the Rust types (src/protocol.rs); do not edit.\n\
         --- Update: {UPDATE_COMMAND}\n\
         --- Every method name and enum value the plugin compares against comes from here.\n\
         local M = {{}}\n\nM.methods = {{\n"
    );
    for (name, method) in methods::ALL {
        let _ = writeln!(out, "  {name} = '{method}',");
    }
    out.push_str("}\n");
    for (_, lua_name, values) in enums() {
        let _ = writeln!(out, "\nM.{lua_name} = {{");
        for value in values {
            let _ = writeln!(out, "  {} = '{value}',", constant(value));
        }
        out.push_str("}\n");
    }
    // A misspelt name is an error where it is used, not a silent nil that compares unequal.
    out.push_str(
        "\nfor name, values in pairs(M) do\n  \
         setmetatable(values, { __index = function(_, key)\n    \
         error(('pen.protocol.%s has no %s'):format(name, tostring(key)), 2)\n  \
         end })\nend\n\nreturn M\n",
    );
    out
}

/// Compares `path` (relative to the repository) with `expected`; rewrites it under
/// `PEN_UPDATE_GENERATED`, else fails with the first differing lines and the command.
fn check(path: &str, expected: &str) {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let actual = std::fs::read_to_string(&full).unwrap_or_default();
    if actual == expected {
        return;
    }
    if std::env::var_os("PEN_UPDATE_GENERATED").is_some() {
        std::fs::write(&full, expected).expect("write the generated file");
        return;
    }
    let mut diff = String::new();
    for change in similar::TextDiff::from_lines(actual.as_str(), expected)
        .unified_diff()
        .context_radius(2)
        .iter_hunks()
    {
        let _ = write!(diff, "{change}");
    }
    panic!(
        "{path} does not match the Rust protocol types.\n\
         Regenerate it with:\n    {UPDATE_COMMAND}\n\
         --- committed\n+++ generated\n{diff}"
    );
}

#[test]
fn typescript_matches_the_rust_types() {
    check(TS_PATH, &typescript());
}

#[test]
fn lua_matches_the_rust_types() {
    check(LUA_PATH, &lua());
}

/// The generated enum lists are what serde writes.
#[test]
fn listed_names_are_the_serialized_names() {
    for decision in Decision::ALL {
        let name = serde_json::to_value(decision).expect("serializes");
        let listed = &enums()[6].2;
        assert!(listed.iter().any(|n| name == *n), "{name}");
    }
    let samples = [
        EntryBody::UserPrompt { text: "t".into() },
        EntryBody::AssistantMessage {
            text: String::new(),
            tool_calls: vec![],
            finish_reason: None,
            usage: None,
            model: None,
            estimated_input_tokens: None,
        },
        EntryBody::ToolCall {
            call_id: "c".into(),
            tool: "pen_read".into(),
            summary: String::new(),
            arguments: Value::Null,
        },
        EntryBody::ToolResult {
            call_id: "c".into(),
            tool: None,
            state: CallOutcome::Done,
            is_error: false,
            content: String::new(),
        },
        EntryBody::TurnEnded(TurnOutcome {
            stop_reason: StopReason::EndTurn,
            last_error: None,
            error_kind: None,
            usage: None,
            session_usage: None,
        }),
        EntryBody::ContextTrimmed(TrimmedData::ContextWindowExceeded {
            shrunk_call_ids: vec![],
            head_bytes: 1,
            provider_message: None,
        }),
        EntryBody::ContextWindowRejected {
            model: "m".into(),
            estimated_tokens: 1,
            reason: "r".into(),
        },
        EntryBody::ToolAllowedForSession {
            tool: "pen_edit".into(),
        },
        EntryBody::Event(serde_json::json!({"type": "x"})),
    ];
    let budget = TrimmedData::from(agent::Trim::Budget(Default::default()));
    let shrunk = TrimmedData::from(agent::Trim::Shrunk {
        call_ids: vec![],
        head_bytes: 1,
    });
    assert_eq!(
        [budget, shrunk].map(|t| serde_json::to_value(t).expect("serializes")["reason"].clone()),
        TrimmedData::REASONS.map(Value::from)
    );
    let kinds: Vec<Value> = samples
        .iter()
        .map(|s| serde_json::to_value(s).expect("serializes")["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        EntryBody::KINDS
            .iter()
            .map(|k| Value::from(*k))
            .collect::<Vec<_>>()
    );
}

/// The `pen/…` methods `docs/protocol.md` documents: every one named in a `###` heading.
fn documented_methods(doc: &str) -> std::collections::BTreeSet<String> {
    doc.lines()
        .filter(|line| line.starts_with("### "))
        .flat_map(|line| {
            line.split('`')
                .filter(|part| part.starts_with("pen/"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `docs/protocol.md` has a section for every method of [`methods::ALL`] and none other: the
/// server registers its requests by these constants, and `tests/suite/serve.rs` checks that it
/// answers each of them.
#[test]
fn docs_protocol_md_documents_exactly_the_methods() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol.md");
    let doc = std::fs::read_to_string(&path).expect("read docs/protocol.md");
    let documented = documented_methods(&doc);
    let defined: std::collections::BTreeSet<String> = methods::ALL
        .iter()
        .map(|(_, method)| method.to_string())
        .collect();
    let missing: Vec<&String> = defined.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&defined).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/protocol.md is out of date: not documented {missing:?}; documented but not in \
         protocol::methods {extra:?}"
    );
}

#[test]
fn documented_methods_are_read_from_headings() {
    let doc = "## x\n### `pen/a` / `pen/b`\ntext `pen/c`\n### `pen/d`\n";
    assert_eq!(
        documented_methods(doc).into_iter().collect::<Vec<_>>(),
        ["pen/a", "pen/b", "pen/d"]
    );
}
