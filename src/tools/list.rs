//! pen_list: one directory, sorted by name and paged with an exclusive name cursor.
//!
//! Every page fits the page budget with its cursor; a name too long for a page on its own comes
//! back cut and flagged while the cursor still moves past it, so no entry is lost or repeated.

use super::budget::{self, escaped_len, fitting_prefix, widest};
use super::{ErrorCode, ToolContext, ToolError, ToolSpec, shown};
use crate::workspace::Target;
use rustix::fs::{AtFlags, FileType};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: Option<String>,
    pub after: Option<String>,
    pub limit: Option<u64>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "pen_list",
        description: "List one directory, sorted by name (byte order). Each entry has `name`, `kind` (file, dir, \
            symlink or other) and `size` for files. Returns `total` entries in the directory and, while more \
            remain, `next_after`: pass it back as `after` for the next page. At most 200 entries a page. A name \
            too long to fit a page on its own comes back cut with `name_truncated: true`.",
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace root (default: the root)."},
                "after": {"type": "string", "description": "Exclusive name cursor: the `next_after` of the previous page."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Entries per page (default and maximum 200)."}
            },
            "additionalProperties": false
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    name_truncated: bool,
}

pub fn run(args: Args, ctx: &ToolContext) -> Result<Value, ToolError> {
    let limits = ctx.limits;
    let limit = super::bounded_count(args.limit, limits.max_list_entries, "limit")?;
    let opened = ctx.open(args.path.as_deref().unwrap_or(""))?;
    let display = opened.resolved.display.clone();
    match &opened.target {
        Target::Dir(_) => {}
        Target::Missing(_) | Target::DanglingLink => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "{} does not exist; list its parent to see what is there",
                    shown(&display)
                ),
            ));
        }
        Target::File(..) | Target::Other => {
            return Err(ToolError::new(
                ErrorCode::NotADirectory,
                format!(
                    "{} is not a directory; read it with pen_read",
                    shown(&display)
                ),
            ));
        }
    }
    // The entries are read from the folder the walk opened, never by its path again.
    let reader = opened.read_dir().map_err(|e| ToolError::io(&display, &e))?;
    // Names that are not UTF-8 are shown (and sorted, and cursored) in their lossy form.
    let mut names: Vec<(String, rustix::fs::DirEntry)> = Vec::new();
    for entry in reader {
        let entry = entry.map_err(|e| ToolError::io(&display, &e.into()))?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        names.push((String::from_utf8_lossy(raw).into_owned(), entry));
    }
    names.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let total = names.len();
    let dir = opened.dir_fd().ok_or_else(|| {
        ToolError::new(
            ErrorCode::NotADirectory,
            format!("{} is not a directory", shown(&display)),
        )
    })?;
    let first = match &args.after {
        Some(after) => names.partition_point(|(name, _)| name.as_bytes() <= after.as_bytes()),
        None => 0,
    };

    let envelope = json!({
        "path": display, "entries": [], "total": widest(total as u64), "next_after": "",
    });
    let budget = budget::page_budget(&envelope, limits)?;
    let mut entries: Vec<Entry> = Vec::new();
    // Bytes of the entries array's contents so far (entries and commas).
    let mut used = 0usize;
    for (name, dir_entry) in names.iter().skip(first).take(limit) {
        // The entry's own type, never its target's; the folder's descriptor answers what the
        // listing does not (a file system without entry types) and gives file sizes.
        let stat = || rustix::fs::statat(dir, dir_entry.file_name(), AtFlags::SYMLINK_NOFOLLOW);
        let file_type = match dir_entry.file_type() {
            FileType::Unknown => {
                stat().map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode))
            }
            known => known,
        };
        let kind = match file_type {
            FileType::Symlink => Kind::Symlink,
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            _ => Kind::Other,
        };
        let size = match kind {
            Kind::File => stat().ok().map(|s| s.st_size as u64),
            _ => None,
        };
        let mut entry = Entry {
            name: name.clone(),
            kind,
            size,
            name_truncated: false,
        };
        let comma = usize::from(!entries.is_empty());
        // The page must hold this entry and the cursor naming it.
        let cursor = escaped_len(name);
        let cost = entry_len(&entry) + comma;
        if used + cost + cursor > budget {
            if !entries.is_empty() {
                break;
            }
            // Alone on its page and still too long: cut the name, flag it, move past it.
            entry.name_truncated = true;
            let fixed = entry_len(&Entry {
                name: String::new(),
                ..entry
            });
            let room = budget.saturating_sub(fixed + cursor);
            let (cut, _) = fitting_prefix(name, room);
            entry.name.truncate(cut);
            entries.push(entry);
            break;
        }
        used += cost;
        entries.push(entry);
    }
    let shown_to = first + entries.len();
    let mut value = json!({ "path": display, "entries": entries, "total": total });
    if shown_to < total && !entries.is_empty() {
        value["next_after"] = json!(names[shown_to - 1].0);
    }
    Ok(value)
}

fn entry_len(entry: &Entry) -> usize {
    serde_json::to_string(entry).map_or(0, |s| s.len())
}
