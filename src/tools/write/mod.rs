//! pen_create and pen_edit: focused, exact writes that keep line endings, BOM and final newline.
//!
//! An edit is a value: [`plan`] reads the file once and computes the new bytes, the bounded
//! diff and the hash of the text they were computed against ([`rewrite`] is the pure function
//! of the file's bytes that does the edit); [`apply`] writes them, atomically, only while the
//! file is still that text, else `stale`. The approval preview and the approved write use the
//! same plan. A failed call never leaves a half-edited file.

mod apply;
mod diff;
mod plan;
pub mod revert;
mod rewrite;

pub use apply::apply;
pub use plan::{EditPlan, plan};

use super::source::hash_bytes;
use super::subject::Subject;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown_size};
use crate::limits::Limits;
use crate::workspace::{Landing, Target, write_in};
use serde::Deserialize;
use serde_json::{Value, json};
use std::os::fd::AsFd;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub edits: Vec<Edit>,
    pub expected_hash: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    pub old_text: String,
    pub new_text: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// What a pen_create call writes: the file.
pub fn create_subject(arguments: &Value) -> Subject {
    Subject::path(arguments)
}

/// What a pen_edit call changes: the file, and how many edits when more than one.
pub fn edit_subject(arguments: &Value) -> Subject {
    let mut subject = Subject::path(arguments);
    let edits = arguments
        .get("edits")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if edits > 1 {
        subject.summary = format!("{} ({edits} edits)", subject.summary);
    }
    subject
}

pub fn create_spec(limits: &Limits) -> ToolDoc {
    let max = shown_size(limits.max_write_argument_bytes as u64);
    ToolDoc {
        description: format!(
            "Create a new text file with the given content; missing parent folders are \
            created. pen_create refuses to overwrite anything that already exists (a file, a \
            folder or a symlink): to change an existing file, read it with pen_read and use \
            pen_edit. The content is written exactly as given, byte for byte, line endings \
            included. The arguments of one call are limited to {max}: build a larger file with \
            a first part here and add the rest with several focused pen_edit calls. Returns the \
            file's size in bytes and lines and its content hash."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to create, relative to the workspace root. It must not exist yet."
                },
                "content": {
                    "type": "string",
                    "description": "The complete text of the new file, written exactly as given. End it with a newline unless the file must not have one."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
    }
}

pub fn edit_spec(limits: &Limits) -> ToolDoc {
    let max = shown_size(limits.max_write_argument_bytes as u64);
    ToolDoc {
        description: format!(
            "Edit an existing text file by exact text replacement. Each edit replaces \
            old_text with new_text. Copy old_text exactly from what pen_read showed (same \
            spaces, tabs and indentation, without line numbers); it must occur exactly once in \
            the file unless replace_all is true, so include a few surrounding lines when a short \
            snippet repeats. Edits apply in order, each to the result of the ones before; if any \
            edit fails, nothing is written. Read the file with pen_read before editing it: an \
            edit of a file that changed since you last read it fails as stale and asks for a \
            re-read. Line endings are handled for you: new_text is converted to the file's \
            line-ending style (LF or CRLF), and the byte-order mark and the final-newline state \
            are kept. The arguments of one call are limited to {max}: make a large change as \
            several focused edits. Returns a unified diff of the change and the file's new hash."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to edit, relative to the workspace root. It must exist; use pen_create for a new file."
                },
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "description": "The replacements, applied in order; each sees the text as the earlier ones left it.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old_text": {
                                "type": "string",
                                "description": "The exact text to replace, copied from pen_read output; it must match exactly once unless replace_all is true. Empty only to fill an empty file."
                            },
                            "new_text": {
                                "type": "string",
                                "description": "The text to put in its place (empty to delete it). Its line breaks are converted to the file's style."
                            },
                            "replace_all": {
                                "type": "boolean",
                                "default": false,
                                "description": "Replace every occurrence of old_text instead of requiring exactly one."
                            }
                        },
                        "required": ["old_text", "new_text"],
                        "additionalProperties": false
                    }
                },
                "expected_hash": {
                    "type": "string",
                    "description": "Optional: the file's hash as pen_read (or the last pen_create/pen_edit) reported it. The edit fails as stale when the file no longer has this hash."
                }
            },
            "required": ["path", "edits"],
            "additionalProperties": false
        }),
    }
}

pub fn create(args: CreateArgs, ctx: &ToolContext) -> Result<Value, ToolError> {
    let opened = ctx.open(&args.path)?;
    let resolved = &opened.resolved;
    let what = match &opened.target {
        Target::Missing(_) => None,
        Target::Dir(_) => Some("a directory"),
        // The walk follows a live symlink to its target, so a symlink seen here dangles.
        Target::DanglingLink => Some("a symlink whose target is missing"),
        Target::File(..) | Target::Other => Some("a file"),
    };
    if let Some(what) = what {
        return Err(already_exists(&args.path, what));
    }
    let display = super::shown(&resolved.display).to_string();
    let (dir, name) = opened.make_parents().map_err(|e| {
        ToolError::new(
            ErrorCode::Io,
            format!("cannot create the folders above {display}: {e}"),
        )
    })?;
    let content = args.content.as_bytes();
    if let Some(recorder) = ctx.recorder {
        recorder
            .before_write(&crate::tools::PendingWrite {
                tool: "pen_create",
                absolute: &resolved.absolute,
                display: &display,
                before: None,
                mode: None,
                after: content,
            })
            .map_err(|reason| apply::not_recorded(&display, &reason))?;
    }
    write_in(dir.as_fd(), name, content, Landing::New).map_err(|e| {
        // Someone created the file between the check above and the write.
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            already_exists(&args.path, "a file")
        } else {
            ToolError::io(&display, &e)
        }
    })?;
    let hash = hash_bytes(content);
    if let Some(ledger) = ctx.ledger {
        ledger.record(&resolved.absolute, &hash);
    }
    Ok(json!({
        "path": display,
        "created": true,
        "bytes": content.len(),
        "lines": count_lines(&args.content),
        "hash": hash,
    }))
}

/// pen_edit, unapproved: plans the edit and writes it over the very text it read, read once.
pub fn edit(args: EditArgs, ctx: &ToolContext) -> Result<Value, ToolError> {
    let (opened, plan) = plan::open_and_plan(args, ctx)?;
    apply::land(plan, &opened, ctx)
}

/// Refuses pen_create/pen_edit arguments over the write limit before parsing them.
pub fn check_write_size(arguments: &Value, limits: &Limits) -> Result<(), ToolError> {
    let size = arguments.to_string().len();
    if size > limits.max_write_argument_bytes {
        return Err(ToolError::new(
            ErrorCode::TooLarge,
            format!(
                "the arguments are {size} bytes; pen_create and pen_edit take at most {} bytes. \
                 Build a large file with a small pen_create and several focused pen_edit calls.",
                limits.max_write_argument_bytes
            ),
        ));
    }
    Ok(())
}

fn already_exists(path: &str, what: &str) -> ToolError {
    ToolError::new(
        ErrorCode::AlreadyExists,
        format!(
            "{path} already exists ({what}); pen_create never overwrites. To change an existing \
             file, read it with pen_read and use pen_edit; to create a new one, choose a path \
             that does not exist."
        ),
    )
}

/// Lines in `text`, counting a last line without a line break.
fn count_lines(text: &str) -> usize {
    let breaks = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    breaks + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// What the tests of this module and its parts share.
#[cfg(test)]
mod test_support {
    use super::Edit;

    pub fn edit(old_text: &str, new_text: &str) -> Edit {
        Edit {
            old_text: old_text.to_string(),
            new_text: new_text.to_string(),
            replace_all: false,
        }
    }

    /// A private key as a file holds it.
    pub const KEY: &str =
        "-----BEGIN PRIVATE KEY-----\nMIIEsecretbody\n-----END PRIVATE KEY-----\n";
}

#[cfg(test)]
mod tests {
    use super::test_support::edit;
    use super::*;
    use crate::tools::ReadLedger;
    use crate::workspace::Workspace;

    #[test]
    fn lines_are_counted_with_a_last_unterminated_line() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\r\nb"), 2);
    }

    #[test]
    fn the_ledger_guards_edits_when_no_hash_is_given() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
        let workspace = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        let limits = Limits::default();
        let ledger = ReadLedger::default();
        let ctx = ToolContext {
            workspace: &workspace,
            limits: &limits,
            editor: None,
            recorder: None,
            ledger: Some(&ledger),
            sandbox: None,
        };
        let args = |old: &str, new: &str, expected: Option<&str>| EditArgs {
            path: "f.txt".into(),
            edits: vec![edit(old, new)],
            expected_hash: expected.map(str::to_string),
        };
        let err = super::edit(args("one", "two", None), &ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::Stale);
        assert!(
            err.message
                .starts_with("read the file with pen_read before editing it"),
            "{}",
            err.message
        );

        let absolute = workspace.resolve("f.txt").unwrap().absolute;
        ledger.record(&absolute, &hash_bytes(b"one\n"));
        let result = super::edit(args("one", "two", None), &ctx).unwrap();
        assert_eq!(ledger.last_seen(&absolute).unwrap(), result["hash"]);
        // The ledger now holds the edited version, so a second edit needs no re-read.
        super::edit(args("two", "three", None), &ctx).unwrap();

        std::fs::write(dir.path().join("f.txt"), "changed\n").unwrap();
        let err = super::edit(args("changed", "x", None), &ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::Stale);
        assert!(
            err.message.contains("changed since you last read it"),
            "{}",
            err.message
        );
        // A matching expected_hash shows the model has the current version.
        let current = hash_bytes(b"changed\n");
        super::edit(args("changed", "x", Some(&current)), &ctx).unwrap();
        assert_eq!(std::fs::read(dir.path().join("f.txt")).unwrap(), b"x\n");
    }

    /// An editor holding one open document, which records the edits it is asked to apply.
    struct OneDocument {
        path: std::path::PathBuf,
        text: std::sync::Mutex<(i32, String)>,
    }

    impl crate::tools::Editor for OneDocument {
        fn snapshot(&self, path: &std::path::Path) -> Option<crate::documents::Snapshot> {
            let text = self.text.lock().unwrap();
            (path == self.path).then(|| crate::documents::Snapshot::new(text.0, &text.1))
        }

        fn apply(
            &self,
            _: &std::path::Path,
            version: i32,
            replacements: &[crate::tools::Replacement],
        ) -> Result<(), String> {
            let mut text = self.text.lock().unwrap();
            if text.0 != version {
                return Err(format!("the document is at version {}", text.0));
            }
            for r in replacements.iter().rev() {
                text.1.replace_range(r.range.clone(), &r.text);
            }
            text.0 += 1;
            Ok(())
        }
    }

    /// A workspace holding `f.txt` with `text`.
    fn workspace_with(text: &str) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), text).unwrap();
        let workspace = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        (dir, workspace)
    }

    fn edit_args(old: &str, new: &str) -> EditArgs {
        EditArgs {
            path: "f.txt".into(),
            edits: vec![edit(old, new)],
            expected_hash: None,
        }
    }

    #[test]
    fn an_unchanged_file_gets_exactly_the_planned_bytes() {
        let (dir, workspace) = workspace_with("a\nb\r\nc\n");
        let limits = Limits::default();
        let ledger = ReadLedger::default();
        let ctx = ToolContext {
            workspace: &workspace,
            limits: &limits,
            ledger: Some(&ledger),
            editor: None,
            recorder: None,
            sandbox: None,
        };
        let absolute = workspace.resolve("f.txt").unwrap().absolute;
        ledger.record(&absolute, &hash_bytes(b"a\nb\r\nc\n"));
        let planned = plan(edit_args("b", "B\nB2"), &ctx).unwrap();
        assert_eq!(planned.planned_hash(), hash_bytes(b"a\nb\r\nc\n"));
        // Planning writes nothing and leaves the ledger alone.
        assert_eq!(
            std::fs::read(dir.path().join("f.txt")).unwrap(),
            b"a\nb\r\nc\n"
        );
        assert_eq!(ledger.last_seen(&absolute).unwrap(), planned.planned_hash());
        let (diff, bytes) = (planned.diff().to_string(), planned.new_bytes().to_vec());
        assert!(diff.contains("-b\r\n+B\n+B2\r\n"), "{diff:?}");
        let result = apply(planned, &ctx).unwrap();
        let written = std::fs::read(dir.path().join("f.txt")).unwrap();
        assert_eq!(written, bytes);
        assert_eq!(result["diff"], diff);
        assert_eq!(result["hash"], hash_bytes(&written));
        assert_eq!(result["source"], "disk");
        assert_eq!(ledger.last_seen(&absolute).unwrap(), result["hash"]);
    }

    #[test]
    fn a_file_changed_after_the_plan_is_stale_and_nothing_is_written() {
        let (dir, workspace) = workspace_with("one\ntwo\n");
        let limits = Limits::default();
        let ctx = ToolContext::plain(&workspace, &limits);
        let file = dir.path().join("f.txt");
        for changed in ["one\nTWO\n", "one\ntwo\nthree\n", ""] {
            std::fs::write(&file, "one\ntwo\n").unwrap();
            let planned = plan(edit_args("one", "1"), &ctx).unwrap();
            std::fs::write(&file, changed).unwrap();
            let err = apply(planned, &ctx).unwrap_err();
            assert_eq!(err.code, ErrorCode::Stale, "{changed:?}: {}", err.message);
            assert!(
                err.message
                    .starts_with("f.txt changed since you last read it (expected hash"),
                "{}",
                err.message
            );
            assert!(
                err.message.ends_with("Nothing was written."),
                "{}",
                err.message
            );
            assert_eq!(std::fs::read_to_string(&file).unwrap(), changed);
        }
        // The same text again, even written anew, is the planned text.
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let planned = plan(edit_args("one", "1"), &ctx).unwrap();
        std::fs::write(&file, "one\ntwo\n").unwrap();
        apply(planned, &ctx).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1\ntwo\n");
    }

    #[test]
    fn a_path_that_leads_elsewhere_after_the_plan_is_stale() {
        let (dir, workspace) = workspace_with("same\n");
        std::fs::write(dir.path().join("g.txt"), "same\n").unwrap();
        std::os::unix::fs::symlink("f.txt", dir.path().join("link.txt")).unwrap();
        let limits = Limits::default();
        let ctx = ToolContext::plain(&workspace, &limits);
        let args = EditArgs {
            path: "link.txt".into(),
            ..edit_args("same", "changed")
        };
        let planned = plan(args, &ctx).unwrap();
        std::fs::remove_file(dir.path().join("link.txt")).unwrap();
        std::os::unix::fs::symlink("g.txt", dir.path().join("link.txt")).unwrap();
        let err = apply(planned, &ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::Stale, "{}", err.message);
        for name in ["f.txt", "g.txt"] {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(name)).unwrap(),
                "same\n"
            );
        }
    }

    #[test]
    fn an_open_document_is_planned_and_applied_through_the_editor() {
        let (dir, workspace) = workspace_with("on disk\n");
        let limits = Limits::default();
        let editor = OneDocument {
            path: workspace.resolve("f.txt").unwrap().absolute,
            text: std::sync::Mutex::new((3, "\u{FEFF}unsaved\nline\n".into())),
        };
        let ctx = ToolContext {
            workspace: &workspace,
            limits: &limits,
            ledger: None,
            editor: Some(&editor),
            recorder: None,
            sandbox: None,
        };
        let first = plan(edit_args("line", "LINE"), &ctx).unwrap();
        let planned = String::from_utf8(first.new_bytes().to_vec()).unwrap();
        assert_eq!(planned, "\u{FEFF}unsaved\nLINE\n");
        let result = apply(first, &ctx).unwrap();
        assert_eq!(result["source"], "editor");
        assert_eq!(editor.text.lock().unwrap().1, planned);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "on disk\n"
        );

        // The buffer changes between the plan and its apply: stale, and the buffer is kept.
        let second = plan(edit_args("LINE", "x"), &ctx).unwrap();
        editor.text.lock().unwrap().1 = "\u{FEFF}typed\nLINE\n".into();
        let err = apply(second, &ctx).unwrap_err();
        assert_eq!(err.code, ErrorCode::Stale, "{}", err.message);
        assert_eq!(editor.text.lock().unwrap().1, "\u{FEFF}typed\nLINE\n");
    }

    #[test]
    fn the_spec_schemas_are_closed() {
        let limits = Limits::default();
        for spec in [create_spec(&limits), edit_spec(&limits)] {
            let schema = &spec.input_schema;
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["additionalProperties"], false);
            for (name, property) in schema["properties"].as_object().unwrap() {
                assert!(property["description"].is_string(), "{name}");
            }
        }
        let items = &edit_spec(&limits).input_schema["properties"]["edits"]["items"];
        assert_eq!(items["additionalProperties"], false);
        assert_eq!(items["required"], json!(["old_text", "new_text"]));
    }
}
