//! Tool names as the model sees them: `mcp__<server>__<tool>`, made of `[A-Za-z0-9_-]`, at most
//! [`MAX_MCP_TOOL_NAME_BYTES`] bytes, unique across every server, decided the same way every time
//! for the same tools (so the prompt prefix stays stable).

use crate::limits::MAX_MCP_TOOL_NAME_BYTES;
use std::collections::BTreeSet;

/// The prefix every MCP tool name has.
pub const PREFIX: &str = "mcp__";

/// `text` with every character outside `[A-Za-z0-9_-]` replaced by `_`.
pub fn sanitise(text: &str) -> String {
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

/// Names each `(server, tool)` pair (given sorted by server, then tool). A name too long is cut
/// and given a short hash of the full name; a name already taken gets `_2`, `_3`… (in the
/// order given, so the same tools always get the same names).
pub fn assign(pairs: &[(String, String)]) -> Vec<String> {
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

    fn pair(server: &str, tool: &str) -> (String, String) {
        (server.to_string(), tool.to_string())
    }

    #[test]
    fn names_are_sanitised_bounded_and_unique() {
        let long = "t".repeat(100);
        let names = assign(&[
            pair("files", "read file"),
            pair("files", "read_file"),
            pair("files", "read.file"),
            pair("web", &long),
            pair("web", &format!("{long}x")),
        ]);
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
        assert_eq!(
            names,
            assign(&[
                pair("files", "read file"),
                pair("files", "read_file"),
                pair("files", "read.file"),
                pair("web", &long),
                pair("web", &format!("{long}x")),
            ])
        );
    }
}
