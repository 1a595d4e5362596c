//! Integration tests for the tool registry: the catalog `pen tool --list` and `pen/listTools`
//! print, built from the configured limits.

use super::lsp_client::LspClient;
use serde_json::{Value, json};
use std::process::Command;

/// What `pen tool --list` prints with `extra` arguments, and no config file or variable.
fn listed_bytes(extra: &[&str]) -> Vec<u8> {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list", "--compact"])
        .args(extra)
        .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
        .env("PEN_CONFIG", "/nonexistent/pen-config.json")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    output.stdout
}

/// The catalog `pen tool --list` prints with `extra` arguments.
fn listed(extra: &[&str]) -> Value {
    serde_json::from_slice(&listed_bytes(extra)).unwrap()
}

/// The description of tool `name` in `catalog`.
fn description<'a>(catalog: &'a Value, name: &str) -> &'a str {
    catalog
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == name)
        .and_then(|tool| tool["description"].as_str())
        .unwrap()
}

#[test]
fn the_default_catalog_is_the_one_pen_has_always_listed() {
    // Written by `pen tool --list` before the registry existed: the same bytes.
    let before = include_str!("../fixtures/catalog/default.json");
    assert_eq!(String::from_utf8(listed_bytes(&[])).unwrap(), before);
}

#[test]
fn the_catalog_states_the_page_a_smaller_result_cap_allows() {
    // A 2 KiB cap leaves pages of at most 1 KiB; the catalog said 32 KiB whatever the cap.
    let catalog = listed(&["--max-result-bytes", "2048"]);
    for (name, page) in [
        ("pen_read", "200 lines and 1 KiB"),
        ("pen_tail", "200 and 1 KiB"),
    ] {
        let text = description(&catalog, name);
        assert!(text.contains(page), "{text}");
        assert!(!text.contains("32 KiB"), "{text}");
    }
    assert!(description(&listed(&[]), "pen_read").contains("200 lines and 32 KiB"));
}

#[test]
fn list_tools_follows_set_config() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 32 KiB"));
    client.request("pen/setConfig", json!({"max_tool_result_bytes": 4096}));
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 2 KiB"));
}
