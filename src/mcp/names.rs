//! Tool names as the model sees them: `mcp__<server>__<tool>`, made of `[A-Za-z0-9_-]`, at most
//! [`MAX_MCP_TOOL_NAME_BYTES`] bytes, unique across every server (assigned over all of them at
//! once), decided the same way every time for the same tools (so the prompt prefix stays
//! stable). A name is never read back to find its server: the assignment says which server and
//! tool each name stands for.

use crate::limits::{MAX_MCP_TOOL_NAME_BYTES, MAX_MCP_VALUE_BYTES};
use std::collections::BTreeSet;

/// The prefix every MCP tool name has.
pub const PREFIX: &str = "mcp__";

/// `text` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
fn sanitise(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Why a server's own name for a tool is refused (the tool is left out), or `None` when pen
/// can name it. An empty name, one that looks like a path (a `/` or `\`, or only dots) or one
/// with a control character would only be mangled into a name that says something else, so it
/// is refused instead; so is one longer than any value of a server's configuration.
pub fn refusal(tool: &str) -> Option<String> {
    if tool.is_empty() {
        Some("its name is empty".into())
    } else if tool.contains(['/', '\\']) || tool.bytes().all(|b| b == b'.') {
        Some("its name looks like a path".into())
    } else if tool.chars().any(char::is_control) {
        Some("its name has a control character".into())
    } else if tool.len() > MAX_MCP_VALUE_BYTES {
        Some(format!(
            "its name is {} bytes; the limit is {MAX_MCP_VALUE_BYTES}",
            tool.len()
        ))
    } else {
        None
    }
}

/// Names each `(server, tool)` pair of every server together (given sorted by server, then
/// tool). A name too long is cut and given a short hash of the full name; a name already taken
/// gets `_2`, `_3`… (in the order given, so the same tools always get the same names).
pub fn assign(pairs: &[(&str, &str)]) -> Vec<String> {
    let mut taken = BTreeSet::new();
    let mut names = Vec::with_capacity(pairs.len());
    for (server, tool) in pairs {
        let full = format!("{PREFIX}{}__{}", sanitise(server), sanitise(tool));
        let base = fit(&full, &format!("{server}\u{0}{tool}"));
        let mut name = base.clone();
        let mut n = 2u32;
        while taken.contains(&name) {
            let suffix = format!("_{n}");
            name = format!(
                "{}{suffix}",
                cut(&base, MAX_MCP_TOOL_NAME_BYTES - suffix.len())
            );
            n += 1;
        }
        taken.insert(name.clone());
        names.push(name);
    }
    names
}

/// `name` when it fits; else its head and 8 hex digits of a hash of `key`.
fn fit(name: &str, key: &str) -> String {
    if name.len() <= MAX_MCP_TOOL_NAME_BYTES {
        return name.to_string();
    }
    let hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    let tail = format!("_{:08x}", hash as u32);
    format!("{}{tail}", cut(name, MAX_MCP_TOOL_NAME_BYTES - tail.len()))
}

/// The first `max` bytes of an ASCII name.
fn cut(name: &str, max: usize) -> &str {
    &name[..name.len().min(max)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_bounded_and_unique() {
        let long = "t".repeat(100);
        let longer = format!("{long}x");
        let pairs = [
            ("files", "read file"),
            ("files", "read_file"),
            ("files", "read.file"),
            ("web", long.as_str()),
            ("web", longer.as_str()),
        ];
        let names = assign(&pairs);
        assert_eq!(names[0], "mcp__files__read_file");
        assert_eq!(names[1], "mcp__files__read_file_2");
        assert_eq!(names[2], "mcp__files__read_file_3");
        for name in &names {
            assert!(name.len() <= MAX_MCP_TOOL_NAME_BYTES, "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            );
        }
        assert_ne!(names[3], names[4]);
        assert_eq!(names, assign(&pairs));
    }

    #[test]
    fn two_servers_never_share_a_name() {
        // `a` + `_x` and `a_` + `x` both spell mcp__a___x: assigned together, they differ.
        let names = assign(&[("a", "_x"), ("a_", "x")]);
        assert_eq!(names, ["mcp__a___x", "mcp__a___x_2"]);
    }

    #[test]
    fn empty_and_path_like_names_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "a/b",
            r"a\b",
            ".",
            "..",
            "a\nb",
            "a\u{0}",
        ] {
            assert!(refusal(bad).is_some(), "{bad:?}");
        }
        for good in ["read_file", "read.file", "get-sum", "read file", "é"] {
            assert_eq!(refusal(good), None, "{good:?}");
        }
    }
}
