//! What a call works on, as people are shown it: one line (the file and its lines, the command,
//! the query), the files it names and the line it starts at. Each tool computes its own from
//! its arguments (a `subject` function in the tool's file, named by its registry entry); a tool
//! pen does not know (an MCP tool's) gets [`Subject::of_arguments`].
//!
//! Arguments are read loosely: a subject is shown before the arguments are checked (and when
//! they are not what the tool takes), so a field of the wrong type is left out, never an error.

use crate::limits::MAX_SUBJECT_ARGUMENTS_CHARS;
use serde_json::Value;

/// What a call works on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subject {
    /// One line: `a.txt lines 10–60`, `cargo test`, `"query" in src`; empty when the arguments
    /// name nothing worth showing.
    pub summary: String,
    /// The files or folders the call names, as the model named them (relative to the
    /// workspace, or absolute).
    pub paths: Vec<String>,
    /// The line of the first path the call starts at (a read's `start_line`).
    pub line: Option<u64>,
}

impl Subject {
    /// The subject of a call that names one path (or none) and nothing else worth showing.
    pub fn path(arguments: &Value) -> Subject {
        let path = text(arguments, "path");
        Subject {
            summary: path.unwrap_or_default().to_string(),
            paths: path.map(str::to_string).into_iter().collect(),
            line: None,
        }
    }

    /// The subject of a call of a tool that says nothing of its own (an MCP tool's): its
    /// command, query or path when it has one, else its arguments as JSON, cut.
    pub fn of_arguments(arguments: &Value) -> Subject {
        if let Some(command) = text(arguments, "command") {
            return Subject {
                summary: command.to_string(),
                ..Subject::path(arguments)
            };
        }
        if text(arguments, "query").is_some() {
            return Subject::query(arguments);
        }
        if text(arguments, "path").is_some() {
            return Subject::lines(arguments);
        }
        let summary = match arguments.as_object() {
            Some(object) if !object.is_empty() => {
                let json = arguments.to_string();
                match json.char_indices().nth(MAX_SUBJECT_ARGUMENTS_CHARS) {
                    Some((at, _)) => format!("{}…", &json[..at]),
                    None => json,
                }
            }
            _ => String::new(),
        };
        Subject {
            summary,
            ..Subject::default()
        }
    }

    /// A search's subject: `"query" in path glob` (where it looks, when the call narrows it).
    pub fn query(arguments: &Value) -> Subject {
        let query = text(arguments, "query").unwrap_or_default();
        let where_: Vec<&str> = [text(arguments, "path"), text(arguments, "glob")]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect();
        let mut summary = format!("\"{query}\"");
        if !where_.is_empty() {
            summary.push_str(" in ");
            summary.push_str(&where_.join(" "));
        }
        Subject {
            summary,
            ..Subject::path(arguments)
        }
    }

    /// A page of a file: `path lines 10–60`, `path from line 10`, or the path, with the line it
    /// starts at.
    pub fn lines(arguments: &Value) -> Subject {
        let mut subject = Subject::path(arguments);
        let start = number(arguments, "start_line");
        match (start, number(arguments, "line_count")) {
            (Some(start), Some(count)) => {
                let end = start.saturating_add(count).saturating_sub(1);
                subject.summary = format!("{} lines {start}–{end}", subject.summary);
            }
            (Some(start), None) => {
                subject.summary = format!("{} from line {start}", subject.summary);
            }
            _ => {}
        }
        subject.line = start;
        subject
    }

    /// The title of a call of `tool`: its name and, when there is one, its summary.
    pub fn title(&self, tool: &str) -> String {
        if self.summary.is_empty() {
            tool.to_string()
        } else {
            format!("{tool} {}", self.summary)
        }
    }
}

/// The string argument `key`, if it is one.
pub fn text<'a>(arguments: &'a Value, key: &str) -> Option<&'a str> {
    arguments.get(key)?.as_str()
}

/// The whole-number argument `key`, if it is one.
pub fn number(arguments: &Value, key: &str) -> Option<u64> {
    arguments.get(key)?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_names_its_lines_and_the_line_it_starts_at() {
        let page = Subject::lines(&json!({"path": "a.txt", "start_line": 10, "line_count": 51}));
        assert_eq!(page.summary, "a.txt lines 10–60");
        assert_eq!(page.paths, ["a.txt"]);
        assert_eq!(page.line, Some(10));
        let from = Subject::lines(&json!({"path": "a.txt", "start_line": 3}));
        assert_eq!(from.summary, "a.txt from line 3");
        let whole = Subject::lines(&json!({"path": "a.txt", "line_count": 5}));
        assert_eq!((whole.summary.as_str(), whole.line), ("a.txt", None));
        // Huge numbers do not overflow.
        let huge = Subject::lines(&json!({"path": "a", "start_line": u64::MAX, "line_count": 9}));
        assert_eq!(
            huge.summary,
            format!("a lines {}–{}", u64::MAX, u64::MAX - 1)
        );
    }

    #[test]
    fn a_search_says_where_it_looks() {
        let search = Subject::query(&json!({"query": "fn main", "path": "src", "glob": "*.rs"}));
        assert_eq!(search.summary, "\"fn main\" in src *.rs");
        assert_eq!(search.paths, ["src"]);
        assert_eq!(
            Subject::query(&json!({"query": "x", "path": ""})).summary,
            "\"x\""
        );
    }

    #[test]
    fn an_unknown_tool_shows_its_arguments() {
        assert_eq!(
            Subject::of_arguments(&json!({"command": "ls", "path": "d"})).summary,
            "ls"
        );
        assert_eq!(
            Subject::of_arguments(&json!({"text": "hi"})).summary,
            r#"{"text":"hi"}"#
        );
        assert_eq!(Subject::of_arguments(&json!({})).summary, "");
        assert_eq!(Subject::of_arguments(&json!("not an object")).summary, "");
        let long = Subject::of_arguments(&json!({"text": "é".repeat(400)}));
        assert_eq!(
            long.summary.chars().count(),
            MAX_SUBJECT_ARGUMENTS_CHARS + 1
        );
        assert!(long.summary.ends_with('…'));
        // A field of the wrong type is left out, never an error.
        assert_eq!(Subject::path(&json!({"path": 5})), Subject::default());
    }

    #[test]
    fn the_title_is_the_tool_and_its_summary() {
        let subject = Subject::path(&json!({"path": "src/a.rs"}));
        assert_eq!(subject.title("pen_read"), "pen_read src/a.rs");
        assert_eq!(Subject::default().title("pen_list"), "pen_list");
    }
}
