//! pen_list: one directory, sorted by name and paged with an exclusive name cursor.
//!
//! The entries of a page fit the page budget; its cursor, a copy of the last name, fits in the
//! half of the cap the budget leaves free, so a minimum page holds a 255-byte plain name whole.
//! A name too long for a page on its own (only escaping can do that) comes back cut and flagged
//! while the cursor still moves past it, so no entry is lost or repeated: the cursor is the
//! full name when it fits, else a short `PREFIX/HASH` cursor that does not repeat the name.

use super::budget::{self, escaped_len, fitting_prefix, widest};
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::LIST_CURSOR_PREFIX_BYTES;
use crate::limits::Limits;
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

pub fn spec(limits: &Limits) -> ToolDoc {
    let max = limits.max_list_entries;
    ToolDoc {
        description: format!(
            "List one directory, sorted by name (byte order). Each entry has `name`, `kind` (file, dir, \
            symlink or other) and `size` for files. Returns `total` entries in the directory and, while more \
            remain, `next_after`: pass it back as `after` for the next page. At most {max} entries a page. A name \
            too long to fit a page on its own comes back cut with `name_truncated: true`."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace root (default: the root)."},
                "after": {"type": "string", "description": "Exclusive name cursor: the `next_after` of the previous page."},
                "limit": {"type": "integer", "minimum": 1, "maximum": max, "description": format!("Entries per page (default and maximum {max}).")}
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
    let first = args
        .after
        .as_deref()
        .map_or(0, |after| first_after(&names, after));

    let envelope = json!({
        "path": display, "entries": [], "total": widest(total as u64), "next_after": "",
    });
    let budget = budget::page_budget(&envelope, limits)?;
    let envelope_len = envelope.to_string().len();
    let mut entries: Vec<Entry> = Vec::new();
    // Bytes of the entries array's contents so far (entries and commas).
    let mut used = 0usize;
    // The cursor of a page whose one entry is a cut name, when that name cannot be repeated.
    let mut cut_cursor: Option<String> = None;
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
        // Only the entries count against the budget. The cursor is a copy of the last name on
        // the page, so it is never longer than the entries and fits in the half of the cap
        // the budget leaves free: a 255-byte plain name always fits a minimum page whole.
        let cost = entry_len(&entry) + comma;
        if used + cost > budget {
            if !entries.is_empty() {
                break;
            }
            // Alone on its page and still too long (only escaping can do that): cut the
            // name, flag it, move past it.
            entry.name_truncated = true;
            let fixed = entry_len(&Entry {
                name: String::new(),
                ..entry
            });
            let (cut, _) = fitting_prefix(name, budget.saturating_sub(fixed));
            entry.name.truncate(cut);
            let used = entry_len(&entry);
            // The full name is the cursor when it fits what the cap leaves (the model then
            // learns the whole name); else a short cursor that names it without repeating it.
            if envelope_len + used + escaped_len(name) > limits.max_tool_result_bytes {
                cut_cursor = Some(long_name_cursor(name));
            }
            entries.push(entry);
            break;
        }
        used += cost;
        entries.push(entry);
    }
    let shown_to = first + entries.len();
    let mut value = json!({ "path": display, "entries": entries, "total": total });
    if shown_to < total && !entries.is_empty() {
        value["next_after"] = json!(cut_cursor.unwrap_or_else(|| names[shown_to - 1].0.clone()));
    }
    Ok(value)
}

/// The index of the first entry after the cursor `after`: a name (exclusive), or the cursor
/// of a cut name too long to repeat, `PREFIX/HASH`. No file name holds a `/`, so the two never
/// meet; a string with a `/` that is not such a cursor is taken as a plain name.
fn first_after<E>(names: &[(String, E)], after: &str) -> usize {
    let plain = || names.partition_point(|(name, _)| name.as_bytes() <= after.as_bytes());
    let Some((prefix, hash)) = after.rsplit_once('/') else {
        return plain();
    };
    let Ok(hash) = u64::from_str_radix(hash, 16) else {
        return plain();
    };
    if let Some(at) = names
        .iter()
        .position(|(name, _)| name.starts_with(prefix) && name_hash(name) == hash)
    {
        return at + 1;
    }
    // The named entry is gone. Everything up to its prefix was on earlier pages; what follows
    // the prefix may have been too, but repeating an entry is better than losing one.
    names.partition_point(|(name, _)| name.as_bytes() <= prefix.as_bytes())
}

/// The cursor for a cut name that the page cannot repeat whole: a short prefix of it and a
/// hash of the full name.
fn long_name_cursor(name: &str) -> String {
    let (cut, _) = fitting_prefix(name, LIST_CURSOR_PREFIX_BYTES);
    format!("{}/{:016x}", &name[..cut], name_hash(name))
}

fn name_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

fn entry_len(entry: &Entry) -> usize {
    serde_json::to_string(entry).map_or(0, |s| s.len())
}
