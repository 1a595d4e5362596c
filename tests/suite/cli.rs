//! The `pen tool` command line: exit codes, usage errors and the catalog.

use super::common::pen_tool;
use serde_json::json;
use std::process::Command;

#[test]
fn tool_errors_exit_1_with_a_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "x", "bogus": 1}),
        &[],
    );
    assert_eq!(run.code, 1);
    let error = &run.json()["error"];
    assert_eq!(error["code"], "invalid_arguments");
    assert!(error["message"].as_str().unwrap().contains("`bogus`"));
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(dir.path(), "pen_nope", &json!({}), &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("no tool named `pen_nope`"),
        "{}",
        run.stderr
    );
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({}),
        &["--max-result-bytes", "1023"],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("between 1024 and 1048576"),
        "{}",
        run.stderr
    );
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "pen_read", "{not json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn list_prints_the_catalog() {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let catalog: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pen_search",
            "pen_list",
            "pen_read",
            "pen_tail",
            "pen_create",
            "pen_edit"
        ]
    );
    for tool in catalog.as_array().unwrap() {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{tool}");
    }
}
