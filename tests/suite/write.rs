//! Integration tests for pen_create and pen_edit: the real binary writing real files.

use super::common::{ToolRun, pen_tool};
use pen::tools::source::hash_bytes;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

fn pen_edit(root: &Path, args: Value) -> ToolRun {
    pen_tool(root, "pen_edit", &args, &[])
}

fn pen_create(root: &Path, args: Value) -> ToolRun {
    pen_tool(root, "pen_create", &args, &[])
}

/// The error object of a failed run, after checking it failed with `code`.
fn error(run: &ToolRun, code: &str) -> String {
    assert_eq!(run.code, 1, "expected an error: {}", run.stdout);
    let value = run.json();
    assert_eq!(value["error"]["code"], code, "{}", run.stdout);
    value["error"]["message"].as_str().unwrap().to_string()
}

/// Writes `before`, replaces `old` with `new`, and checks the bytes before and after the span
/// are untouched and the span now holds `expected_new`.
fn check_span_edit(before: &[u8], old: &str, new: &str, span: &[u8], expected_new: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), before).unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": old, "new_text": new}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    let after = fs::read(dir.path().join("f.txt")).unwrap();
    let at = before
        .windows(span.len())
        .position(|w| w == span)
        .expect("span in file");
    let prefix = &before[..at];
    let suffix = &before[at + span.len()..];
    assert_eq!(&after[..prefix.len()], prefix);
    assert_eq!(&after[after.len() - suffix.len()..], suffix);
    assert_eq!(
        &after[prefix.len()..after.len() - suffix.len()],
        expected_new,
        "{:?}",
        String::from_utf8_lossy(&after)
    );
    assert_eq!(run.json()["hash"], hash_bytes(&after));
}

#[test]
fn crlf_files_keep_their_bytes_and_get_crlf_new_text() {
    // An old_text with bare `\n` still matches the CRLF lines, and new text lands as CRLF.
    check_span_edit(
        b"head\r\nfn a() {\r\n    1\r\n}\r\ntail\r\n",
        "fn a() {\n    1\n}",
        "fn a() {\n    2\n}",
        b"fn a() {\r\n    1\r\n}",
        b"fn a() {\r\n    2\r\n}",
    );
}

#[test]
fn mixed_files_keep_their_bytes_and_get_the_majority_style() {
    check_span_edit(
        b"one\r\ntwo\nthree\r\nfour\r\n",
        "two",
        "2a\n2b",
        b"two",
        b"2a\r\n2b",
    );
}

#[test]
fn bom_files_keep_the_bom_and_their_bytes() {
    let before = "\u{FEFF}l1\nπ 中文 😀\nl3\n".as_bytes();
    check_span_edit(
        before,
        "中文",
        "e\u{301}",
        "中文".as_bytes(),
        "e\u{301}".as_bytes(),
    );
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), before).unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": "l1", "new_text": "L1"}]}),
    );
    assert_eq!(run.json()["bom"], true);
    assert!(
        fs::read(dir.path().join("f.txt"))
            .unwrap()
            .starts_with(b"\xEF\xBB\xBFL1\n")
    );
}

#[test]
fn a_missing_final_newline_stays_missing() {
    check_span_edit(b"a\nb\nlast", "b", "B", b"b", b"B");
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), b"a\r\nlast").unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": "last", "new_text": "last\nadded\n"}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        fs::read(dir.path().join("f.txt")).unwrap(),
        b"a\r\nlast\r\nadded"
    );
    let result = run.json();
    assert_eq!(result["final_newline"], false);
    assert_eq!(result["eol"], "crlf");
}

#[test]
fn the_result_reports_counts_diff_and_file_facts() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "a\nb\nc\nb\n").unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "./f.txt", "edits": [
            {"old_text": "a", "new_text": "A"},
            {"old_text": "b", "new_text": "B", "replace_all": true},
        ]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    let after = fs::read(dir.path().join("f.txt")).unwrap();
    assert_eq!(after, b"A\nB\nc\nB\n");
    assert_eq!(
        run.json(),
        json!({
            "path": "f.txt",
            "edits_applied": 2,
            "replacements": 3,
            "diff": "--- a/f.txt\n+++ b/f.txt\n@@ -1,4 +1,4 @@\n-a\n-b\n+A\n+B\n c\n-b\n+B\n",
            "hash": hash_bytes(&after),
            "eol": "lf",
            "bom": false,
            "final_newline": true,
            "source": "disk",
        })
    );
}

#[test]
fn no_match_shows_the_nearest_candidates() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("f.rs"),
        "fn main() {\n    let total = 1;\n    println!(\"{total}\");\n}\n",
    )
    .unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.rs", "edits": [{"old_text": "  let totl = 1;", "new_text": "x"}]}),
    );
    let message = error(&run, "no_match");
    assert!(
        message.starts_with("edit 1 of 1 (edits[0]): old_text was not found in f.rs."),
        "{message}"
    );
    assert!(message.contains("\n  2:     let total = 1;"), "{message}");
    assert!(
        message.contains("Re-read the file with pen_read"),
        "{message}"
    );
}

#[test]
fn ambiguous_match_lists_the_lines() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "x\ny\nx\ny\nx\n").unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": "x", "new_text": "z"}]}),
    );
    let message = error(&run, "ambiguous_match");
    assert!(message.contains("line(s) 1, 3, 5."), "{message}");
    assert!(message.contains("replace_all"), "{message}");
    assert_eq!(
        fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "x\ny\nx\ny\nx\n"
    );
}

#[test]
fn replace_all_replaces_every_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "old old\nold\n").unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": "old", "new_text": "new", "replace_all": true}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["replacements"], 3);
    assert_eq!(
        fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "new new\nnew\n"
    );
}

#[test]
fn a_failing_second_edit_leaves_the_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "alpha\nbeta\n").unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [
            {"old_text": "alpha", "new_text": "ALPHA"},
            {"old_text": "gamma", "new_text": "GAMMA"},
        ]}),
    );
    let message = error(&run, "no_match");
    assert!(message.starts_with("edit 2 of 2 (edits[1])"), "{message}");
    assert!(message.contains("Nothing was written"), "{message}");
    assert_eq!(
        fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "alpha\nbeta\n"
    );
}

#[test]
fn expected_hash_guards_against_stale_writes() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "v1\n").unwrap();
    let stale = hash_bytes(b"v0\n");
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "expected_hash": stale, "edits": [{"old_text": "v1", "new_text": "v2"}]}),
    );
    let message = error(&run, "stale");
    assert!(
        message.contains("changed since you last read it"),
        "{message}"
    );
    assert!(message.contains("pen_read"), "{message}");
    assert_eq!(fs::read(dir.path().join("f.txt")).unwrap(), b"v1\n");

    let current = hash_bytes(b"v1\n");
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "expected_hash": current, "edits": [{"old_text": "v1", "new_text": "v2"}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["hash"], hash_bytes(b"v2\n"));
}

#[test]
fn permissions_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sh");
    fs::write(&path, "#!/bin/sh\necho one\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "run.sh", "edits": [{"old_text": "one", "new_text": "two"}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(fs::read_to_string(&path).unwrap(), "#!/bin/sh\necho two\n");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o755
    );
    // No temp file is left beside it.
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_symlink_stays_a_symlink_and_its_target_is_edited() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/real.txt"), "target\n").unwrap();
    symlink("src/real.txt", dir.path().join("link.txt")).unwrap();
    let run = pen_edit(
        dir.path(),
        json!({"path": "link.txt", "edits": [{"old_text": "target", "new_text": "edited"}]}),
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["path"], "src/real.txt");
    let link = fs::symlink_metadata(dir.path().join("link.txt")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(
        fs::read_to_string(dir.path().join("src/real.txt")).unwrap(),
        "edited\n"
    );
}

#[test]
fn edit_refuses_what_it_cannot_edit() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("folder")).unwrap();
    fs::write(dir.path().join("bin.dat"), b"abc\0def").unwrap();
    fs::write(dir.path().join("latin1.txt"), b"caf\xE9\n").unwrap();
    fs::write(dir.path().join("ok.txt"), "ok\n").unwrap();
    let one = |path: &str| json!({"path": path, "edits": [{"old_text": "a", "new_text": "b"}]});

    let message = error(&pen_edit(dir.path(), one("missing.txt")), "not_found");
    assert!(message.contains("pen_create"), "{message}");
    error(&pen_edit(dir.path(), one("folder")), "not_a_file");
    error(&pen_edit(dir.path(), one("bin.dat")), "binary");
    let message = error(&pen_edit(dir.path(), one("latin1.txt")), "invalid_utf8");
    assert!(message.contains("offset 3"), "{message}");
    error(&pen_edit(dir.path(), one("../ok.txt")), "outside_workspace");
    let message = error(
        &pen_edit(dir.path(), json!({"path": "ok.txt", "edits": []})),
        "invalid_arguments",
    );
    assert!(message.contains("edits is empty"), "{message}");
    let message = error(
        &pen_edit(
            dir.path(),
            json!({"path": "ok.txt", "edits": [{"old_text": "", "new_text": "x"}]}),
        ),
        "invalid_arguments",
    );
    assert!(message.contains("old_text is empty"), "{message}");
    assert_eq!(fs::read(dir.path().join("ok.txt")).unwrap(), b"ok\n");
}

#[test]
fn create_writes_exact_content_and_makes_parents() {
    let dir = tempfile::tempdir().unwrap();
    let content = "line one\r\nzwei 😀\nno newline";
    let run = pen_create(dir.path(), json!({"path": "a/b/c.txt", "content": content}));
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.json(),
        json!({
            "path": "a/b/c.txt",
            "created": true,
            "bytes": content.len(),
            "lines": 3,
            "hash": hash_bytes(content.as_bytes()),
        })
    );
    assert_eq!(
        fs::read(dir.path().join("a/b/c.txt")).unwrap(),
        content.as_bytes()
    );
    assert_eq!(fs::read_dir(dir.path().join("a/b")).unwrap().count(), 1);
    // A created file has the permissions of any new file (0o666 less the umask), not those of
    // a temp file (0o600).
    fs::write(dir.path().join("probe"), "").unwrap();
    let mode = |path: &str| {
        fs::metadata(dir.path().join(path))
            .unwrap()
            .permissions()
            .mode()
    };
    assert_eq!(mode("a/b/c.txt"), mode("probe"));
}

#[test]
fn create_refuses_to_overwrite_anything() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("file.txt"), "keep").unwrap();
    fs::create_dir(dir.path().join("dir")).unwrap();
    symlink("nowhere", dir.path().join("dangling")).unwrap();
    for path in ["file.txt", "dir", "dangling"] {
        let run = pen_create(dir.path(), json!({"path": path, "content": "new"}));
        let message = error(&run, "already_exists");
        assert!(message.contains("pen_edit"), "{message}");
    }
    assert_eq!(fs::read(dir.path().join("file.txt")).unwrap(), b"keep");
    assert!(
        fs::symlink_metadata(dir.path().join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn create_outside_the_workspace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();
    for path in [
        "../escape.txt",
        "out/escape.txt",
        "/tmp/escape-from-pen.txt",
    ] {
        let run = pen_create(dir.path(), json!({"path": path, "content": "x"}));
        error(&run, "outside_workspace");
    }
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn arguments_over_64_kib_are_too_large() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "x\n").unwrap();
    let big = "y".repeat(64 * 1024);
    let run = pen_create(dir.path(), json!({"path": "big.txt", "content": big}));
    let message = error(&run, "too_large");
    assert!(message.contains("several focused pen_edit"), "{message}");
    assert!(!dir.path().join("big.txt").exists());
    let run = pen_edit(
        dir.path(),
        json!({"path": "f.txt", "edits": [{"old_text": "x", "new_text": big}]}),
    );
    error(&run, "too_large");
}

/// A file of `lines` numbered lines and an edit that rewrites all of them.
fn huge_edit(dir: &Path, lines: usize) -> Value {
    let before: String = (0..lines).map(|n| format!("line {n}\n")).collect();
    let after: String = (0..lines).map(|n| format!("LINE {n}\n")).collect();
    fs::write(dir.join("big.txt"), &before).unwrap();
    json!({"path": "big.txt", "edits": [{"old_text": before, "new_text": after}]})
}

#[test]
fn a_huge_edit_gives_a_bounded_diff() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_edit(dir.path(), huge_edit(dir.path(), 2_000));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let diff = run.json()["diff"].as_str().unwrap().to_string();
    assert!(diff.len() <= 8 * 1024, "{}", diff.len());
    assert!(
        diff.starts_with("--- a/big.txt\n+++ b/big.txt\n@@ "),
        "{diff}"
    );
    let note = diff.rsplit_once('\n').unwrap().1;
    assert!(
        note.starts_with("… diff truncated (") && note.ends_with(" more bytes)"),
        "{note}"
    );
    assert!(
        fs::read_to_string(dir.path().join("big.txt"))
            .unwrap()
            .starts_with("LINE 0\nLINE 1\n")
    );
}

#[test]
fn the_result_fits_a_small_cap() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_edit",
        &huge_edit(dir.path(), 500),
        &["--max-result-bytes", "1024"],
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.len() <= 1024, "{}", run.stdout.len());
    // The budget cut the diff, so the cap never had to cut the result.
    let result = run.json();
    assert!(
        result["diff"]
            .as_str()
            .unwrap()
            .contains("… diff truncated ("),
        "{result}"
    );
    assert_eq!(result["replacements"], 1);
}
