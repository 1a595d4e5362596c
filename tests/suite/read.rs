//! Integration tests for pen_read and pen_tail: exact paging, budgets, the seed's 1 MB log and
//! key-material refusal.

use super::common::{call_tool, pen_tool};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

/// Pages through `path` from the start with the returned cursors; checks every page against
/// the cap and the page bounds, and returns the concatenated content.
fn read_all(root: &Path, path: &str, cap: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut args = json!({ "path": path });
    for _ in 0..1_000_000 {
        let (result, observation) = call_tool(root, cap, "pen_read", &args);
        let page = result.unwrap_or_else(|e| panic!("{path} at {args}: {e}"));
        assert!(
            observation.len() <= cap,
            "page of {} bytes over cap {cap}",
            observation.len()
        );
        let reparsed: Value =
            serde_json::from_str(&observation).expect("observation is whole JSON");
        assert_eq!(reparsed, page);
        let content = page["content"].as_str().unwrap();
        assert!(
            content.len() <= 32 * 1024,
            "page of {} bytes",
            content.len()
        );
        assert!(
            content.matches('\n').count() <= 200,
            "page of more than 200 lines"
        );
        out.extend_from_slice(content.as_bytes());
        match (page.get("next_start_line"), page.get("next_offset")) {
            (Some(line), Some(offset)) => {
                assert!(!content.is_empty(), "an empty page must not have a cursor");
                args = json!({ "path": path, "start_line": line, "offset": offset });
            }
            (None, None) => return out,
            _ => panic!("half a cursor: {page}"),
        }
    }
    panic!("paging did not end");
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,12}",
        Just("中文字符".to_string()),
        Just("😀👍🏽".to_string()),
        Just("e\u{301}a\u{308}".to_string()),
        Just("\"quoted\" \\ back\tslash\u{1}".to_string()),
        Just(String::new()),
    ]
}

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(piece(), 0..6).prop_map(|p| p.concat()),
        // Lines longer than any page at small caps.
        1 => (piece(), 200usize..3000).prop_map(|(p, n)| p.repeat(n / p.len().max(1) + 1)),
    ]
}

fn file_text() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((line(), prop_oneof!["\n", "\r\n"]), 0..120),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(lines, final_newline, bom)| {
            let mut text = String::new();
            if bom {
                text.push('\u{feff}');
            }
            for (line, eol) in &lines {
                text.push_str(line);
                text.push_str(eol);
            }
            if !final_newline {
                text.push_str("tail without newline");
            }
            text.into_bytes()
        })
}

fn cap() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(1_024usize),
        1_024usize..4_096,
        4_096usize..70_000,
        Just(1_048_576usize)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn pages_concatenate_to_the_file(bytes in file_text(), cap in cap()) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f.txt"), &bytes).unwrap();
        let rebuilt = read_all(dir.path(), "f.txt", cap);
        prop_assert_eq!(rebuilt, bytes);
    }

    #[test]
    fn tail_is_the_exact_end(bytes in file_text(), cap in cap(), lines in 1u64..250) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f.txt"), &bytes).unwrap();
        let (result, observation) = call_tool(dir.path(), cap, "pen_tail", &json!({"path": "f.txt", "line_count": lines}));
        let tail = result.unwrap();
        prop_assert!(observation.len() <= cap);
        let content = tail["content"].as_str().unwrap();
        let start = tail["start_offset"].as_u64().unwrap() as usize;
        prop_assert_eq!(&bytes[start..], content.as_bytes());
        prop_assert!(content.len() <= 32 * 1024);
        prop_assert!(tail["line_count"].as_u64().unwrap() <= lines.min(200));
        if !bytes.is_empty() {
            prop_assert!(!content.is_empty());
        }
    }
}

#[test]
fn start_line_alone_finds_the_same_page_as_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=1000).map(|i| format!("line {i}\r\n")).collect();
    fs::write(dir.path().join("f.txt"), &text).unwrap();
    let (first, _) = call_tool(dir.path(), 4096, "pen_read", &json!({"path": "f.txt"}));
    let first = first.unwrap();
    let next_line = first["next_start_line"].clone();
    let (by_cursor, _) = call_tool(
        dir.path(),
        4096,
        "pen_read",
        &json!({"path": "f.txt", "start_line": next_line, "offset": first["next_offset"]}),
    );
    let (by_line, _) = call_tool(
        dir.path(),
        4096,
        "pen_read",
        &json!({"path": "f.txt", "start_line": next_line}),
    );
    assert_eq!(by_cursor.unwrap(), by_line.unwrap());
    let (page, _) = call_tool(
        dir.path(),
        65_536,
        "pen_read",
        &json!({"path": "f.txt", "start_line": 500, "line_count": 2}),
    );
    let page = page.unwrap();
    assert_eq!(page["content"], "line 500\r\nline 501\r\n");
    assert_eq!(page["eol"], "crlf");
    assert_eq!(page["end_line"], 501);
    assert_eq!(page["next_start_line"], 502);
}

/// Issue 11 item 12: a `start_line` that does not go with `offset` is refused with the line
/// that does, never served under a wrong label (it once returned lines 3–4 labelled 50–51).
#[test]
fn a_cursor_pair_that_does_not_match_is_refused_and_names_the_right_line() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=100).map(|i| format!("l{i}\n")).collect();
    fs::write(dir.path().join("f.txt"), &text).unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "f.txt", "start_line": 50, "offset": 9}),
        &[],
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    let error = &run.json()["error"];
    assert_eq!(error["code"], "bad_cursor", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("offset 9 is on line 4") && message.contains("start_line 4"),
        "{message}"
    );
    // The pair it names reads from there, labelled right.
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "f.txt", "start_line": 4, "offset": 9, "line_count": 2}),
        &[],
    );
    let page = run.json();
    assert_eq!(page["content"], "l4\nl5\n");
    assert_eq!(
        (page["start_line"].clone(), page["end_line"].clone()),
        (json!(4), json!(5))
    );
}

/// Every (start_line, offset) pair is served only with the true line at that offset, across
/// line marks (a file of several 64 KiB strides), at line starts and inside lines.
#[test]
fn every_page_is_labelled_with_the_lines_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..40_000)
        .map(|i| format!("{i} {}\n", "é".repeat(i % 7)))
        .collect();
    fs::write(dir.path().join("f.txt"), &text).unwrap();
    let bytes = text.as_bytes();
    let mut offset = 0usize;
    while offset < bytes.len() {
        if (0x80..0xC0).contains(&bytes[offset]) {
            offset += 1;
            continue;
        }
        let line = bytes[..offset].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        for start_line in [line - 1, line, line + 1, line + 1_000] {
            if start_line == 0 {
                continue;
            }
            let args = json!({"path": "f.txt", "start_line": start_line, "offset": offset, "line_count": 3});
            let (result, _) = call_tool(dir.path(), 65_536, "pen_read", &args);
            match result {
                Ok(page) => {
                    assert_eq!(start_line, line, "{args} served as {page}");
                    let content = page["content"].as_str().unwrap();
                    assert!(text[offset..].starts_with(content));
                    let end = offset + content.len();
                    let last = if content.ends_with('\n') {
                        end - 1
                    } else {
                        end
                    };
                    let end_line = bytes[..last].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
                    assert_eq!(page["end_line"], end_line, "{args}");
                }
                Err(e) => {
                    assert_ne!(start_line, line, "{args}: {e}");
                    assert_eq!(e.code, pen::tools::ErrorCode::BadCursor);
                    assert!(e.message.contains(&format!("on line {line}")), "{e}");
                }
            }
        }
        offset += 4_093;
    }
}

/// A cursor kept across a change to the file is checked against the file as it is now: lines
/// added above it make the old pair fail, and the pair it names reads the right lines.
#[test]
fn a_stale_cursor_after_the_file_changed_never_mislabels_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    let text: String = (1..=400).map(|i| format!("line {i}\n")).collect();
    fs::write(&path, &text).unwrap();
    let (first, _) = call_tool(
        dir.path(),
        65_536,
        "pen_read",
        &json!({"path": "f.txt", "line_count": 100}),
    );
    let first = first.unwrap();
    let (line, offset) = (
        first["next_start_line"].clone(),
        first["next_offset"].clone(),
    );
    assert_eq!(line, 101);
    // Three short lines in place of the first ten, keeping the bytes after them in place.
    let head: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let replaced = format!(
        "{}\n{}\n{}\n",
        "x".repeat(20),
        "y".repeat(20),
        "z".repeat(head.len() - 43)
    ) + &text[head.len()..];
    assert_eq!(replaced.len(), text.len());
    fs::write(&path, &replaced).unwrap();
    let (stale, _) = call_tool(
        dir.path(),
        65_536,
        "pen_read",
        &json!({"path": "f.txt", "start_line": line, "offset": offset}),
    );
    let error = stale.unwrap_err();
    assert_eq!(error.code, pen::tools::ErrorCode::BadCursor);
    assert!(error.message.contains("is on line 94"), "{error}");
    let (fresh, _) = call_tool(
        dir.path(),
        65_536,
        "pen_read",
        &json!({"path": "f.txt", "start_line": 94, "offset": offset, "line_count": 1}),
    );
    let fresh = fresh.unwrap();
    assert_eq!(fresh["content"], "line 101\n");
    assert_eq!(fresh["start_line"], 94);
}

#[test]
fn the_seed_log_read_with_only_a_path_returns_a_first_page_with_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    let mut i = 0;
    while log.len() < 1_000_000 {
        log.push_str(&format!(
            "2026-09-08T12:00:{:02}Z INFO request {i} served in {} ms\n",
            i % 60,
            i % 97
        ));
        i += 1;
    }
    fs::write(dir.path().join("big.log"), &log).unwrap();
    let run = pen_tool(dir.path(), "pen_read", &json!({"path": "big.log"}), &[]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.len() <= 65_536,
        "result of {} bytes",
        run.stdout.len()
    );
    let page = run.json();
    assert_eq!(page["start_line"], 1);
    assert_eq!(page["end_line"], 200);
    assert_eq!(page["next_start_line"], 201);
    let content = page["content"].as_str().unwrap();
    assert_eq!(
        page["next_offset"].as_u64().unwrap() as usize,
        content.len()
    );
    assert!(log.starts_with(content));
    // The whole log is reachable through the cursors.
    assert_eq!(read_all(dir.path(), "big.log", 65_536), log.as_bytes());
}

#[test]
fn a_single_huge_line_is_served_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let line = "x".repeat(300_000);
    fs::write(dir.path().join("min.js"), &line).unwrap();
    let (first, _) = call_tool(dir.path(), 65_536, "pen_read", &json!({"path": "min.js"}));
    let first = first.unwrap();
    assert_eq!(first["partial_line"], true);
    assert_eq!(first["next_start_line"], 1);
    assert_eq!(read_all(dir.path(), "min.js", 65_536), line.as_bytes());
}

#[test]
fn tail_reads_the_end_with_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=500).map(|i| format!("{i}\n")).collect();
    fs::write(dir.path().join("f.log"), &text).unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_tail",
        &json!({"path": "f.log", "line_count": 3}),
        &[],
    );
    assert_eq!(run.code, 0);
    let tail = run.json();
    assert_eq!(tail["content"], "498\n499\n500\n");
    assert_eq!(tail["start_line"], 498);
    assert_eq!(tail["end_line"], 500);
    assert_eq!(tail["line_count"], 3);
    assert_eq!(tail["final_newline"], true);
}

#[test]
fn metadata_reports_bom_final_newline_and_hash() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("b.txt"), "\u{feff}a\r\nb\nc").unwrap();
    let page = pen_tool(dir.path(), "pen_read", &json!({"path": "b.txt"}), &[]).json();
    assert_eq!(page["content"], "\u{feff}a\r\nb\nc");
    assert_eq!(page["bom"], true);
    assert_eq!(page["final_newline"], false);
    assert_eq!(page["eol"], "mixed");
    assert_eq!(page["source"], "disk");
    assert!(page["hash"].as_str().unwrap().starts_with("xxh3:"));
}

#[test]
fn errors_carry_guidance() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("bin.dat"), b"abc\0def").unwrap();
    fs::write(dir.path().join("latin1.txt"), b"caf\xe9\n").unwrap();
    fs::write(dir.path().join("short.txt"), "a\nb\n").unwrap();
    let cases = [
        (json!({"path": "bin.dat"}), "binary", "NUL byte at offset 3"),
        (
            json!({"path": "latin1.txt"}),
            "invalid_utf8",
            "0xE9 at offset 3",
        ),
        (json!({"path": "nope.txt"}), "not_found", "pen_list"),
        (
            json!({"path": "../x"}),
            "outside_workspace",
            "outside the workspace",
        ),
        (
            json!({"path": "short.txt", "start_line": 9}),
            "bad_cursor",
            "has 2 lines",
        ),
        (
            json!({"path": "short.txt", "start_line": 0}),
            "invalid_arguments",
            "1-based",
        ),
        (
            json!({"path": "short.txt", "offset": 2}),
            "bad_cursor",
            "pass both",
        ),
        (
            json!({"path": "short.txt", "start_line": 2, "offset": 99}),
            "bad_cursor",
            "past the end",
        ),
        (
            json!({"path": "short.txt", "start_line": "2"}),
            "invalid_arguments",
            "`start_line`",
        ),
        (json!({"path": "."}), "not_a_file", "pen_list"),
    ];
    for (args, code, text) in cases {
        let run = pen_tool(dir.path(), "pen_read", &args, &[]);
        assert_eq!(run.code, 1, "{args}");
        let error = &run.json()["error"];
        assert_eq!(error["code"], code, "{args}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(text),
            "{args}: {error}"
        );
    }
    let run = pen_tool(dir.path(), "pen_tail", &json!({"path": "latin1.txt"}), &[]);
    assert_eq!(run.json()["error"]["code"], "invalid_utf8");
    // Whole lines before a bad byte are served; the error names it when its line comes up.
    fs::write(dir.path().join("later.txt"), b"good\nbad \xff\n").unwrap();
    let run = pen_tool(dir.path(), "pen_read", &json!({"path": "later.txt"}), &[]);
    let page = run.json();
    assert_eq!(page["content"], "good\n");
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "later.txt", "start_line": 2, "offset": 5}),
        &[],
    );
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("0xFF at offset 9")
    );
    let run = pen_tool(dir.path(), "pen_tail", &json!({"path": "later.txt"}), &[]);
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("0xFF at offset 9")
    );
}

#[test]
fn a_path_that_leaves_no_room_for_a_page_is_an_explicit_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut deep = dir.path().to_path_buf();
    let mut rel = Vec::new();
    for i in 0..4 {
        let part = format!("{i}{}", "d".repeat(199));
        deep.push(&part);
        rel.push(part);
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("f.txt"), "hello\n").unwrap();
    let file = format!("{}/f.txt", rel.join("/"));
    let dir_path = rel.join("/");
    for (tool, args) in [
        ("pen_read", json!({"path": file})),
        ("pen_tail", json!({"path": file})),
        ("pen_list", json!({"path": dir_path})),
    ] {
        let run = pen_tool(dir.path(), tool, &args, &["--max-result-bytes", "1024"]);
        assert_eq!(run.code, 1, "{tool}");
        let error = &run.json()["error"];
        assert_eq!(error["code"], "budget_too_small", "{tool}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("max_tool_result_bytes")
        );
        let ok = pen_tool(dir.path(), tool, &args, &[]);
        assert_eq!(ok.code, 0, "{tool} at the default cap: {}", ok.stdout);
    }
}

/// A PEM private key of about `kib` KiB, with `indent` before every line.
fn pem_key(kib: usize, indent: &str) -> String {
    let mut key = format!("{indent}-----BEGIN PRIVATE KEY-----\n");
    let body = "MIIJQgIBADANBgkqhkiG9w0BAQEFAASCCSwwggkoAgEAAoICAQC7VJTUt9Us8cKj";
    while key.len() < kib * 1024 {
        key.push_str(indent);
        key.push_str(body);
        key.push('\n');
    }
    key.push_str(&format!("{indent}-----END PRIVATE KEY-----\n"));
    key
}

fn assert_key_refused(run: &super::common::ToolRun) {
    assert_eq!(
        run.code,
        1,
        "served: {}",
        &run.stdout[..run.stdout.len().min(300)]
    );
    let error = &run.json()["error"];
    assert_eq!(error["code"], "key_material", "{error}");
    assert!(!run.stdout.contains("MIIJQgIBADANBgkqhkiG9w0BAQEFAASCCSww"));
}

#[test]
fn a_long_key_read_deep_or_tailed_fails_closed() {
    for indent in ["", "    "] {
        let dir = tempfile::tempdir().unwrap();
        let key = pem_key(187, indent);
        let lines = key.lines().count();
        let text = format!("config:\n  tls_key: |\n{key}");
        fs::write(dir.path().join("secrets.yaml"), &text).unwrap();
        // A page in the middle of the body, far past the BEGIN line, by line and by cursor.
        let middle = lines / 2 + 2;
        let run = pen_tool(
            dir.path(),
            "pen_read",
            &json!({"path": "secrets.yaml", "start_line": middle}),
            &[],
        );
        assert_key_refused(&run);
        let offset = text.match_indices('\n').nth(middle - 2).unwrap().0 + 1;
        let run = pen_tool(
            dir.path(),
            "pen_read",
            &json!({"path": "secrets.yaml", "start_line": middle, "offset": offset}),
            &["--max-result-bytes", "1024"],
        );
        assert_key_refused(&run);
        // The first page holds the BEGIN line; the lines before it are offered.
        let run = pen_tool(
            dir.path(),
            "pen_read",
            &json!({"path": "secrets.yaml"}),
            &[],
        );
        assert_key_refused(&run);
        assert!(run.stdout.contains("line_count 2"), "{}", run.stdout);
        // A file that ends inside the key, tailed.
        let cut = &text[..text.len() - 40_000];
        let cut = &cut[..cut.rfind('\n').unwrap() + 1];
        fs::write(dir.path().join("cut.pem"), cut).unwrap();
        for cap in ["1024", "65536"] {
            let run = pen_tool(
                dir.path(),
                "pen_tail",
                &json!({"path": "cut.pem"}),
                &["--max-result-bytes", cap],
            );
            assert_key_refused(&run);
        }
        // The text after the END line is readable, and the refusal says where it starts.
        let after = format!("{text}after: the key\n");
        fs::write(dir.path().join("after.yaml"), &after).unwrap();
        let last = after.lines().count();
        let run = pen_tool(
            dir.path(),
            "pen_read",
            &json!({"path": "after.yaml", "start_line": last}),
            &[],
        );
        assert_eq!(run.json()["content"], "after: the key\n");
        let run = pen_tool(
            dir.path(),
            "pen_tail",
            &json!({"path": "after.yaml", "line_count": 1}),
            &[],
        );
        assert_eq!(run.json()["content"], "after: the key\n");
        let run = pen_tool(
            dir.path(),
            "pen_read",
            &json!({"path": "after.yaml", "start_line": last - 3}),
            &[],
        );
        assert_key_refused(&run);
        assert!(
            run.stdout.contains(&format!("start_line {last}")),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn an_ordinary_deep_page_of_a_large_log_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let log: String = (0..40_000)
        .map(|i| format!("{i:08} GET /api/items?page={i} 200 3ms\n"))
        .collect();
    fs::write(dir.path().join("access.log"), &log).unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "access.log", "start_line": 30_000, "line_count": 5}),
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(
        run.json()["content"]
            .as_str()
            .unwrap()
            .starts_with("00029999 GET")
    );
    // Base64 payloads that are not keys are served while ordinary text is in the look-back.
    let mut mixed = String::new();
    for i in 0..5_000 {
        mixed.push_str(&format!(
            "event {i}\ndGhpcyBpcyBub3QgYSBrZXkgYnV0IGJhc2U2NA==\n"
        ));
    }
    fs::write(dir.path().join("events.log"), &mixed).unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "events.log", "start_line": 9_000}),
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
}
