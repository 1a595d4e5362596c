//! The management commands' output for a person at a terminal (`pen sessions`, `pen revert`,
//! `pen fork`, `pen mcp list`): one aligned line per item, status words, and what to run next.
//! With `--json`, or when stdout is not a terminal, the commands print JSON lines instead, as
//! they always have, so scripts do not break.

use super::terminal::Style;
use crate::protocol::{FileStatus, ForkSessionResult, RevertTurnResult, SessionSummary};

/// Whether a command prints for a person: not asked for JSON, and stdout is a terminal.
pub fn for_a_person(json: bool) -> bool {
    use std::io::IsTerminal;
    !json && std::io::stdout().is_terminal()
}

/// How long ago `then` was, both in Unix milliseconds, in the largest whole unit.
pub fn ago(then_ms: i64, now_ms: i64) -> String {
    let seconds = (now_ms.saturating_sub(then_ms) / 1000).max(0);
    match seconds {
        0..60 => "just now".to_string(),
        60..3_600 => format!("{} min ago", seconds / 60),
        3_600..86_400 => format!("{} h ago", seconds / 3_600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

/// One session: its id, when it last changed, its size and title.
pub fn session_line(session: &SessionSummary, now_ms: i64, style: Style) -> String {
    format!(
        "{}  {:>12}  {:>5} entries  {}",
        style.bold(&session.session_id),
        ago(session.updated_at, now_ms),
        session.entry_count,
        session.title.as_deref().unwrap_or("(untitled)")
    )
}

/// A file's revert status in words.
fn file_status(status: FileStatus, style: Style) -> String {
    match status {
        FileStatus::Reverted => style.green("reverted"),
        FileStatus::Deleted => style.green("deleted"),
        FileStatus::Unchanged => "unchanged".to_string(),
        FileStatus::Conflict => style.red("conflict: changed since pen wrote it"),
        FileStatus::NotRevertible => style.red("not revertible"),
        FileStatus::NotReverted => style.yellow("not reverted yet"),
    }
}

/// What a revert did, file by file, then what it could not undo and what to do about it.
pub fn revert_lines(result: &RevertTurnResult, style: Style) -> Vec<String> {
    let mut lines = vec![format!(
        "reverted {} turn{} of {}",
        result.turns.len(),
        if result.turns.len() == 1 { "" } else { "s" },
        result.session_id
    )];
    if result.files.is_empty() {
        lines.push("  no file changes to revert".to_string());
    }
    for file in &result.files {
        let mut line = format!("  {}  {}", file.path, file_status(file.status, style));
        if let Some(reason) = &file.reason {
            line.push_str(&format!(" ({reason})"));
        }
        lines.push(line);
        if let Some(diff) = &file.diff {
            lines.push(style.diff(diff));
        }
    }
    for call in &result.commands {
        lines.push(format!(
            "  {} {}: its effects are not reverted",
            call.tool, call.summary
        ));
    }
    if let Some(turns) = &result.without_checkpoints {
        lines.push(format!(
            "  {} turn(s) copied by a fork without checkpoints: revert them in the original",
            turns.len()
        ));
    }
    if result
        .files
        .iter()
        .any(|f| f.status == FileStatus::Conflict)
    {
        lines.push(style.dim("overwrite the conflicts too: pen revert … --force"));
    }
    lines
}

/// A fork: the new session and how to continue it.
pub fn fork_lines(result: &ForkSessionResult, style: Style) -> Vec<String> {
    vec![
        format!(
            "forked {} before turn {}: {}",
            result.forked_from,
            result.before_turn_id,
            style.bold(&result.session_id)
        ),
        style.dim(&format!(
            "continue it: pen run --session {} \"…\"",
            result.session_id
        )),
    ]
}

/// One MCP server: its name, status, tools and, when it is not running, why.
pub fn mcp_server_line(
    status: &crate::mcp::ServerStatus,
    tools: &[String],
    style: Style,
) -> String {
    use crate::mcp::ServerState as S;
    let state = match &status.state {
        S::Running { .. } => style.green("running"),
        S::Idle | S::Starting => status.state.as_str().to_string(),
        S::NotApproved { denied: false } => style.yellow("not approved"),
        S::NotApproved { denied: true } => style.red("denied"),
        S::Failed { .. } | S::Refused => style.red(status.state.as_str()),
        S::Disabled => style.dim("disabled"),
    };
    let mut line = format!(
        "{}{}  {state}",
        style.bold(&status.name),
        if status.project { " (.mcp.json)" } else { "" }
    );
    if !tools.is_empty() {
        line.push_str(&format!(
            "  {} tools, ~{} tokens: {}",
            tools.len(),
            status.schema_tokens,
            tools.join(", ")
        ));
    }
    if let Some(reason) = &status.reason {
        line.push_str(&format!("\n  {reason}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_forks_read_as_lines() {
        assert_eq!(ago(0, 59_999), "just now");
        assert_eq!(ago(0, 3 * 60_000), "3 min ago");
        assert_eq!(ago(0, 5 * 3_600_000), "5 h ago");
        assert_eq!(ago(0, 3 * 86_400_000), "3 days ago");
        assert_eq!(ago(10, 0), "just now");
        let session = SessionSummary {
            session_id: "s_1".into(),
            title: Some("fix the parser".into()),
            created_at: 0,
            updated_at: 0,
            entry_count: 12,
        };
        assert_eq!(
            session_line(&session, 120_000, Style::plain()),
            "s_1     2 min ago     12 entries  fix the parser"
        );
        let fork = ForkSessionResult {
            session_id: "s_2".into(),
            forked_from: "s_1".into(),
            before_turn_id: "t_3".into(),
        };
        assert_eq!(
            fork_lines(&fork, Style::plain()),
            [
                "forked s_1 before turn t_3: s_2",
                "continue it: pen run --session s_2 \"…\""
            ]
        );
    }
}
