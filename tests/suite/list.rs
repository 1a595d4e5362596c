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
                // Only a lone entry is cut, and the cursor carries its full name.
                assert_eq!(entries.len(), 1);
                if let Some(full) = page["next_after"].as_str() {
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
