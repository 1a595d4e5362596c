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

mod providers;

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

fn string_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The wire names of `values`, as serde writes them.
fn wire_names<T: Serialize>(values: &[T]) -> Vec<String> {
    values
        .iter()
        .map(|v| match serde_json::to_value(v) {
            Ok(Value::String(name)) => name,
            other => panic!("an enum value serializes to a string, not {other:?}"),
        })
        .collect()
}

fn strs(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The enums both editors take their names from: (TypeScript / Lua name, values).
fn enums() -> Vec<(&'static str, &'static str, Vec<String>)> {
    vec![
        ("STOP_REASONS", "stop_reason", wire_names(&StopReason::ALL)),
        (
            "TURN_ERROR_KINDS",
            "error_kind",
            wire_names(&TurnErrorKind::ALL),
        ),
        (
            "CALL_OUTCOMES",
            "call_outcome",
            wire_names(&CallOutcome::ALL),
        ),
        (
            "EVENT_KINDS",
            "event_kind",
            EventKind::ALL
                .iter()
                .map(|k| k.as_str().to_string())
                .collect(),
        ),
        ("ENTRY_KINDS", "entry_kind", strs(&EntryBody::KINDS)),
        ("TRIM_REASONS", "trim_reason", strs(&TrimmedData::REASONS)),
        ("DECISIONS", "decision", wire_names(&Decision::ALL)),
        (
            "APPROVAL_KINDS",
            "approval_kind",
            strs(&ApprovalParams::KINDS),
        ),
        ("FILE_STATUSES", "file_status", wire_names(&FileStatus::ALL)),
        (
            "MCP_SERVER_STATES",
            "mcp_server_state",
            wire_names(&McpServerState::ALL),
        ),
        (
            "WINDOW_SOURCES",
            "window_source",
            wire_names(&WindowSource::ALL),
        ),
        ("TOOL_KINDS", "tool_kind", wire_names(&ToolKind::ALL)),
        (
            "PLAN_STEP_STATUSES",
            "plan_step_status",
            wire_names(&PlanStepStatus::ALL),
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
    decl::<McpServerState>(&cfg, &mut out);
    decl::<McpStatusResponse>(&cfg, &mut out);
    decl::<McpServerStatus>(&cfg, &mut out);
    decl::<CallToolParams>(&cfg, &mut out);
    decl::<NewSessionParams>(&cfg, &mut out);
    decl::<ListSessionsParams>(&cfg, &mut out);
    decl::<SessionSummary>(&cfg, &mut out);
    decl::<ListSessionsResponse>(&cfg, &mut out);
    decl::<GetTranscriptParams>(&cfg, &mut out);
    decl::<TranscriptResponse>(&cfg, &mut out);
    decl::<RevertTurnParams>(&cfg, &mut out);
    decl::<FileStatus>(&cfg, &mut out);
    decl::<RevertedFileReport>(&cfg, &mut out);
    decl::<UnrevertedCall>(&cfg, &mut out);
    decl::<InterruptedRevertReport>(&cfg, &mut out);
    decl::<RevertTurnResult>(&cfg, &mut out);
    decl::<ForkSessionParams>(&cfg, &mut out);
    decl::<ForkSessionResult>(&cfg, &mut out);
    decl::<TranscriptRecord>(&cfg, &mut out);
    decl::<EntryBody>(&cfg, &mut out);
    decl::<RevertedFileStatus>(&cfg, &mut out);
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
    decl::<ContextWindowData>(&cfg, &mut out);
    decl::<PlanData>(&cfg, &mut out);
    decl::<PlanStepInfo>(&cfg, &mut out);
    decl::<PlanStepStatus>(&cfg, &mut out);
    decl::<WindowSource>(&cfg, &mut out);
    decl::<ToolKind>(&cfg, &mut out);
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
            let _ = writeln!(out, "  {} = '{value}',", constant(&value));
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

/// The trim reasons and approval kinds listed are what serde writes.
#[test]
fn listed_tags_are_the_serialized_names() {
    let request = |kind| agent::ApprovalRequest {
        session_id: "s".into(),
        turn_id: "t".into(),
        call_id: "c".into(),
        kind,
        tool: "pen_edit".into(),
        summary: String::new(),
        arguments: Value::Null,
        diff: None,
        not_revertible: None,
    };
    let start = agent::ApprovalKind::StartMcpServer {
        server: "files".into(),
        command_line: "node server.js".into(),
        root: "/w".into(),
    };
    assert_eq!(
        [agent::ApprovalKind::ToolCall, start].map(|kind| {
            let params = ApprovalParams::from(request(kind));
            serde_json::to_value(params).expect("serializes")["kind"].clone()
        }),
        ApprovalParams::KINDS.map(Value::from)
    );
    let budget = TrimmedData::from(agent::Trim::Budget(Default::default()));
    let shrunk = TrimmedData::from(agent::Trim::Shrunk {
        call_ids: vec![],
        head_bytes: 1,
    });
    assert_eq!(
        [budget, shrunk].map(|t| serde_json::to_value(t).expect("serializes")["reason"].clone()),
        TrimmedData::REASONS.map(Value::from)
    );
}

/// One stored item of every kind, and one event of every kind this pen knows (the `match` in
/// the test makes a new [`transcript::Event`] variant a compile error until it has a sample).
fn stored_samples() -> Vec<transcript::Item> {
    use crate::providers::window::{ModelWindow, WindowSource as Source};
    use transcript::{Event, Item};
    let file = transcript::InstructionFile {
        path: "AGENTS.md".into(),
        bytes: 5,
        cut: false,
        text: "hello".into(),
        refused: None,
    };
    vec![
        Item::UserPrompt { text: "t".into() },
        Item::AssistantMessage(Default::default()),
        Item::ToolCall(Default::default()),
        Item::ToolResult(Default::default()),
        Item::Event(Event::SessionContext(transcript::SessionContext {
            instructions: vec![file.clone()],
            environment: "- pen".into(),
        })),
        Item::Event(Event::InstructionsDelivered {
            call_id: "c".into(),
            files: vec![file.clone()],
        }),
        Item::Event(Event::InstructionsChanged {
            instructions: vec![file],
        }),
        Item::Event(Event::TurnEnded {
            stop_reason: StopReason::EndTurn,
            last_error: None,
            error_kind: None,
            usage: None,
            session_usage: None,
        }),
        Item::Event(Event::ContextWindowRejected {
            model: "m".into(),
            estimated_tokens: 1,
            reason: "r".into(),
            uncalibrated_tokens: None,
        }),
        Item::Event(Event::ContextWindowFound {
            model: "m".into(),
            window: ModelWindow::new(2048, Source::LlamaCppProps),
        }),
        Item::Event(Event::ProviderWarning {
            model: "m".into(),
            message: "w".into(),
        }),
        Item::Event(Event::ResultsShrunk {
            call_ids: vec!["c".into()],
            head_bytes: 1,
            reason: "r".into(),
        }),
        Item::Event(Event::ContextTrimmed(Default::default())),
        Item::Event(Event::ContextCompacted(Default::default())),
        Item::Event(Event::ToolAllowedForSession {
            tool: "pen_edit".into(),
        }),
        Item::Event(Event::Plan {
            call_id: "c".into(),
            steps: vec![crate::tools::plan::PlanStep {
                text: "s".into(),
                status: crate::tools::plan::StepStatus::InProgress,
            }],
        }),
        Item::Event(Event::RevertStarted {
            turns: vec!["t_1".into()],
            files: vec!["a.txt".into()],
        }),
        Item::Event(Event::FilesReverted {
            turns: vec!["t_1".into()],
            files: vec![transcript::RevertedFile {
                path: "a.txt".into(),
                status: "reverted".into(),
            }],
            note: "n".into(),
            interrupted: false,
        }),
        Item::Event(Event::Other(serde_json::json!({"type": "from_the_future"}))),
    ]
}

/// Every stored event this pen knows reaches `pen/getTranscript` as a typed entry: only an
/// event it does not know (a newer pen's) is sent as its stored payload (`kind: "event"`).
/// And the kinds sent are [`EntryBody::KINDS`], which the editors' tables list.
#[test]
fn every_known_stored_event_has_a_typed_entry() {
    use transcript::{Event, Item};
    let samples = stored_samples();
    let mut covered = std::collections::BTreeSet::new();
    let mut kinds = std::collections::BTreeSet::new();
    for item in samples {
        if let Item::Event(event) = &item {
            // Exhaustive: a new event kind needs an arm here and a sample above.
            covered.insert(match event {
                Event::SessionContext(_) => 0,
                Event::InstructionsDelivered { .. } => 1,
                Event::InstructionsChanged { .. } => 2,
                Event::TurnEnded { .. } => 3,
                Event::ContextWindowRejected { .. } => 4,
                Event::ContextWindowFound { .. } => 5,
                Event::ProviderWarning { .. } => 6,
                Event::ResultsShrunk { .. } => 7,
                Event::ContextTrimmed(_) => 8,
                Event::ContextCompacted(_) => 9,
                Event::ToolAllowedForSession { .. } => 10,
                Event::RevertStarted { .. } => 11,
                Event::FilesReverted { .. } => 12,
                Event::Other(_) => 13,
                Event::Plan { .. } => 14,
            });
        }
        let known = !matches!(item, Item::Event(Event::Other(_)));
        let payload = item.to_payload();
        let body = EntryBody::from(item);
        assert!(
            !known || !matches!(body, EntryBody::Event(_)),
            "the stored event {payload} reaches pen/getTranscript untyped"
        );
        let sent = serde_json::to_value(&body).expect("serializes");
        kinds.insert(sent["kind"].as_str().expect("a kind").to_string());
    }
    assert_eq!(covered, (0..15).collect(), "a known event has no sample");
    assert_eq!(
        kinds,
        EntryBody::KINDS.iter().map(|k| k.to_string()).collect()
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

/// Whether a doc comment lists values: two backticked snake_case words joined by `, `, ` or `
/// or `, or ` (`` `running`, `failed` or `denied` ``).
fn lists_values(doc: &str) -> bool {
    let is_value = |word: &str| {
        word.starts_with(|c: char| c.is_ascii_lowercase())
            && word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    // Split on backticks: odd parts are quoted, even parts lie between them.
    let parts: Vec<&str> = doc.split('`').collect();
    parts.windows(3).enumerate().any(|(i, w)| {
        i % 2 == 1 && is_value(w[0]) && [", ", " or ", ", or "].contains(&w[1]) && is_value(w[2])
    })
}

/// The `String` fields of `source` (plain, `Option` or `Vec`) whose doc comment lists values:
/// `(field, doc)`. The doc is the `///` lines right above the field, attributes between them
/// skipped.
fn strings_with_listed_values(source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut doc = String::new();
    for line in source.lines().map(str::trim) {
        if let Some(text) = line.strip_prefix("///") {
            doc.push_str(text);
            doc.push(' ');
            continue;
        }
        if line.starts_with("#[") || line.starts_with(')') || line.starts_with('"') {
            continue;
        }
        let field = line.trim_start_matches("pub ").trim_end_matches(',');
        if let Some((name, ty)) = field.split_once(": ")
            && ["String", "Option<String>", "Vec<String>"].contains(&ty)
            && lists_values(&doc)
        {
            found.push((name.to_string(), doc.clone()));
        }
        doc.clear();
    }
    found
}

/// A closed set of values on the wire is an enum the editors get generated, never a `String`
/// whose doc lists the values (as `RevertedFileReport.status` once was).
#[test]
fn no_wire_string_lists_its_values() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol.rs");
    let source = std::fs::read_to_string(&path).expect("read src/protocol.rs");
    let found = strings_with_listed_values(&source);
    assert!(
        found.is_empty(),
        "wire strings whose docs list their values (make them enums with ALL and add them to \
         codegen's enums): {found:?}"
    );
}

#[test]
fn listed_values_are_found_in_field_docs() {
    let before = "pub struct RevertedFileReport {\n    pub path: String,\n    \
                  /// `reverted`, `deleted`, `unchanged`, `conflict` or `not_revertible`.\n    \
                  pub status: String,\n}\n";
    let found = strings_with_listed_values(before);
    assert_eq!(
        found.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        ["status"]
    );
    let fields = "    /// `done` or `error` (from `isError`).\n    \
                  #[serde(default)]\n    state: Option<String>,\n    \
                  /// The model's text; `null` when absent.\n    text: String,\n    \
                  /// `running` or `failed`.\n    count: u64,\n";
    assert_eq!(strings_with_listed_values(fields).len(), 1);
    assert!(!lists_values("The `pen_edit` diff, or `null`: see `docs`."));
    assert!(lists_values("`a`, or `b_2`"));
}
