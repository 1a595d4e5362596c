//! Integration tests for pen_list: every entry exactly once, sorted, within the cap.

use super::common::{call_tool, pen_tool};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

/// Follows `next_after` from the start; returns the names of every page in order. Each
/// observation is checked against the cap; a cut name must be flagged and be a prefix of the
/// entry it stands for.
fn list_all(root: &Path, cap: usize, limit: Option<u64>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    let mut expected_total = None;
    loop {
        let mut args = json!({});
        if let Some(after) = &after {
            args["after"] = json!(after);
        }
        if let Some(limit) = limit {
            args["limit"] = json!(limit);
        }
        let (result, observation) = call_tool(root, cap, "pen_list", &args);
        let page = result.unwrap_or_else(|e| panic!("cap {cap}: {e}"));
        assert!(
            observation.len() <= cap,
            "page of {} bytes over cap {cap}",
            observation.len()
        );
        let reparsed: Value = serde_json::from_str(&observation).expect("whole JSON");
        assert_eq!(reparsed, page);
        let total = page["total"].as_u64().unwrap();
        assert_eq!(*expected_total.get_or_insert(total), total);
        let entries = page["entries"].as_array().unwrap();
        if let Some(limit) = limit {
            assert!(entries.len() as u64 <= limit);
        }
        assert!(entries.len() <= 200);
        for entry in entries {
            let name = entry["name"].as_str().unwrap().to_string();
            if entry["name_truncated"] == true {
                // Only a lone entry is cut, and the cursor carries its full name when the
                // name fits; else a `PREFIX/HASH` cursor (no name holds a `/`).
                assert_eq!(entries.len(), 1);
                if let Some(full) = page["next_after"].as_str()
                    && !full.contains('/')
                {
                    assert!(full.starts_with(&name));
                    names.push(full.to_string());
                    continue;
                }
                names.push(format!("{name}…"));
                continue;
            }
            names.push(name);
        }
        match page.get("next_after") {
            Some(next) => {
                assert!(!entries.is_empty());
                after = Some(next.as_str().unwrap().to_string());
            }
            None => {
                assert_eq!(names.len() as u64, total, "pages ended early");
                return names;
            }
        }
    }
}

fn make_entries(dir: &Path, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        if i % 7 == 3 {
            fs::create_dir(dir.join(name)).unwrap();
        } else {
            fs::write(dir.join(name), "x".repeat(i % 50)).unwrap();
        }
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names
}

/// Names of every shape the issue lists: plain, with spaces, Unicode and 255 bytes long.
fn mixed_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match i % 5 {
            0 => format!("file {i}.txt"),
            1 => format!("データ_{i}_é"),
            2 => format!("{i:05}{}", "n".repeat(250)),
            3 => format!("dir-{i}"),
            _ => format!("😀{i}"),
        })
        .collect()
}

#[test]
fn every_entry_exactly_once_sorted_at_every_size_and_cap() {
    for count in [0usize, 1, 199, 200, 201, 5_000] {
        let dir = tempfile::tempdir().unwrap();
        let names = mixed_names(count);
        make_entries(dir.path(), &names);
        let expected = sorted(names);
        for cap in [1_024usize, 4_096, 65_536] {
            let listed = list_all(dir.path(), cap, None);
            let cut_free: Vec<&String> = listed.iter().filter(|n| !n.ends_with('…')).collect();
            assert_eq!(listed.len(), expected.len(), "count {count} cap {cap}");
            for (got, want) in listed.iter().zip(&expected) {
                match got.strip_suffix('…') {
                    Some(prefix) => assert!(want.starts_with(prefix)),
                    None => assert_eq!(got, want, "count {count} cap {cap}"),
                }
            }
            assert!(cut_free.len() + 1 >= listed.len());
        }
    }
}

#[test]
fn five_thousand_entries_at_the_smallest_cap() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..5_000).map(|i| format!("entry-{i:05}")).collect();
    make_entries(dir.path(), &names);
    assert_eq!(list_all(dir.path(), 1_024, None), sorted(names));
}

#[test]
fn a_255_byte_name_is_cut_and_flagged_at_the_smallest_cap_and_the_cursor_moves_on() {
    let dir = tempfile::tempdir().unwrap();
    let long = "\"".repeat(200) + &"q".repeat(55);
    let names = vec!["a".to_string(), long.clone(), "z".to_string()];
    make_entries(dir.path(), &names);
    // `"` sorts before `a`: the long name comes first, alone on its page.
    let (first, _) = call_tool(dir.path(), 1_024, "pen_list", &json!({}));
    let first = first.unwrap();
    let entry = &first["entries"][0];
    assert_eq!(entry["name_truncated"], true);
    assert!(long.starts_with(entry["name"].as_str().unwrap()));
    assert_eq!(first["next_after"], long.as_str());
    assert_eq!(list_all(dir.path(), 1_024, None), sorted(names));
}

/// Issue 11 item 13: at the 1,024-byte floor a plain 250- or 255-byte name comes back whole
/// (the page must not also pay for the name again as its cursor), in the root and in a folder.
#[test]
fn plain_250_and_255_byte_names_fit_whole_at_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("some").join("folder");
    fs::create_dir_all(&sub).unwrap();
    let names = vec![
        "a".repeat(250),
        "b".repeat(255),
        "c".repeat(255),
        "d".to_string(),
        format!("{}.txt", "e".repeat(251)),
    ];
    for (folder, path) in [(dir.path(), None), (sub.as_path(), Some("some/folder"))] {
        make_entries(folder, &names);
        let mut after: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let mut args = json!({});
            if let Some(path) = path {
                args["path"] = json!(path);
            }
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let (result, observation) = call_tool(dir.path(), 1_024, "pen_list", &args);
            let page = result.unwrap();
            assert!(observation.len() <= 1_024, "{}", observation.len());
            for entry in page["entries"].as_array().unwrap() {
                assert!(entry.get("name_truncated").is_none(), "{entry}");
                seen.push(entry["name"].as_str().unwrap().to_string());
            }
            match page["next_after"].as_str() {
                Some(next) => after = Some(next.to_string()),
                None => break,
            }
        }
        let mut expected = names.clone();
        if path.is_none() {
            expected.push("some".to_string());
        }
        assert_eq!(seen, sorted(expected), "{path:?}");
        // The model can open the file by the name it was given. (pen_read's own envelope holds
        // the path too, so at the 1,024-byte floor a 250-byte path leaves it less than a
        // minimum page and it asks for a larger cap; 4,096 is plenty.)
        let read = call_tool(
            dir.path(),
            4_096,
            "pen_read",
            &json!({"path": format!("{}{}", path.map_or(String::new(), |p| format!("{p}/")), "a".repeat(250))}),
        );
        assert!(read.0.is_ok(), "{:?}", read.0);
    }
}

/// A name whose escaped form is longer than the cap (255 control characters, 1,530 bytes
/// escaped) is cut and flagged, the page stays under the cap, and its short cursor moves past
/// exactly that entry, even among names that share a long prefix, or after it is deleted.
#[test]
fn a_name_that_escapes_past_the_cap_is_cut_and_its_cursor_moves_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = "\u{1}".repeat(255);
    let second = "\u{1}".repeat(254) + "\u{2}";
    let names = vec![
        first.clone(),
        second.clone(),
        "a".to_string(),
        "z".to_string(),
    ];
    make_entries(dir.path(), &names);
    let (page, observation) = call_tool(dir.path(), 1_024, "pen_list", &json!({}));
    let page = page.unwrap();
    // The observation is the whole result, not one the cap cut before its cursor.
    assert!(observation.len() <= 1_024, "{}", observation.len());
    let reparsed: Value = serde_json::from_str(&observation).expect("whole JSON");
    assert_eq!(reparsed, page);
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["name_truncated"], true);
    assert!(first.starts_with(entries[0]["name"].as_str().unwrap()));
    let cursor = page["next_after"].as_str().unwrap().to_string();
    assert!(cursor.contains('/') && cursor.len() < 200, "{cursor}");
    let (next, _) = call_tool(dir.path(), 1_024, "pen_list", &json!({"after": cursor}));
    let next = next.unwrap();
    assert_eq!(next["entries"][0]["name_truncated"], true);
    let shown = next["entries"][0]["name"].as_str().unwrap();
    assert!(second.starts_with(shown));
    assert_ne!(next["next_after"].as_str(), Some(cursor.as_str()));
    let listed = list_all(dir.path(), 1_024, None);
    assert_eq!(listed.len(), 4);
    assert_eq!(&listed[2..], ["a", "z"]);
    // The entry a cursor names is gone: nothing after it is lost.
    fs::remove_file(dir.path().join(&first)).unwrap();
    let (rest, _) = call_tool(
        dir.path(),
        1_024,
        "pen_list",
        &json!({"after": cursor, "limit": 200}),
    );
    let rest = rest.unwrap();
    assert!(
        rest["entries"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("\u{1}"),
        "{rest}"
    );
    // A plain name with a `/` (which no file name holds) still works as an exclusive cursor.
    let (plain, _) = call_tool(dir.path(), 1_024, "pen_list", &json!({"after": "a/b"}));
    assert_eq!(plain.unwrap()["entries"][0]["name"], "z");
}

#[test]
fn kinds_sizes_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("file.txt"), "12345").unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("file.txt", dir.path().join("link")).unwrap();
    let run = pen_tool(dir.path(), "pen_list", &json!({}), &[]);
    assert_eq!(run.code, 0);
    assert_eq!(
        run.json(),
        json!({
            "path": "",
            "entries": [
                {"name": "file.txt", "kind": "file", "size": 5},
                {"name": "link", "kind": "symlink"},
                {"name": "sub", "kind": "dir"}
            ],
            "total": 3
        })
    );
    let run = pen_tool(dir.path(), "pen_list", &json!({"limit": 2}), &[]);
    assert_eq!(run.json()["next_after"], "link");
    let run = pen_tool(
        dir.path(),
        "pen_list",
        &json!({"limit": 2, "after": "link"}),
        &[],
    );
    assert_eq!(
        run.json()["entries"],
        json!([{"name": "sub", "kind": "dir"}])
    );
    assert!(run.json().get("next_after").is_none());
}

#[test]
fn list_errors() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), "x").unwrap();
    for (args, code) in [
        (json!({"path": "f"}), "not_a_directory"),
        (json!({"path": "missing"}), "not_found"),
        (json!({"path": ".."}), "outside_workspace"),
        (json!({"limit": 0}), "invalid_arguments"),
        (json!({"limit": -1}), "invalid_arguments"),
    ] {
        let run = pen_tool(dir.path(), "pen_list", &args, &[]);
        assert_eq!(run.code, 1, "{args}");
        assert_eq!(run.json()["error"]["code"], code, "{args}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn no_entry_lost_or_repeated(
        names in prop::collection::hash_set("[a-zA-Z0-9 _.é中😀-]{1,60}", 0..80),
        cap in prop_oneof![Just(1_024usize), 1_024usize..3_000, Just(65_536usize)],
        limit in prop::option::of(1u64..250),
    ) {
        let names: Vec<String> = names.into_iter().filter(|n| n != "." && n != "..").collect();
        let dir = tempfile::tempdir().unwrap();
        make_entries(dir.path(), &names);
        prop_assert_eq!(list_all(dir.path(), cap, limit), sorted(names));
    }
}
