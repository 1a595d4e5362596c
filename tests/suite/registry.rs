//! Integration tests for the tool registry: the catalog `pen tool --list` and `pen/listTools`
//! print, built from the configured limits.

use super::lsp_client::LspClient;
use serde_json::{Value, json};
use std::process::Command;

/// What `pen tool --list` prints with `extra` arguments, and no config file or variable.
fn listed_bytes(extra: &[&str]) -> Vec<u8> {
    listed_bytes_under(extra, &[])
}

/// What `pen tool --list` prints with `extra` arguments and only the variables `vars`.
fn listed_bytes_under(extra: &[&str], vars: &[(&str, &str)]) -> Vec<u8> {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list", "--compact"])
        .args(extra)
        .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
        .env_remove("PEN_BUDGET_POLICY")
        .env_remove("PEN_CONTEXT_WINDOW_TOKENS")
        .envs(vars.iter().copied())
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

/// The page a 128,000-token window fits under policy 4: (128,000 − 4,096 output − 2,560
/// margin) tokens × 4 bytes ÷ 32 (`Limits::fitted_to_budget`).
const FITTED_PAGE_AT_128K: &str = "15168 bytes";

#[test]
fn the_default_catalog_is_the_one_pen_has_always_listed() {
    // Written by `pen tool --list` before the registry existed: the same bytes with the window
    // unset (the default: a turn fits its pages to the window it finds) and under budget
    // policy 3, which keeps the pages it always had.
    let before = include_str!("../fixtures/catalog/default.json");
    assert_eq!(String::from_utf8(listed_bytes(&[])).unwrap(), before);
    let policy_3 = listed_bytes_under(&[], &[("PEN_BUDGET_POLICY", "3")]);
    assert_eq!(String::from_utf8(policy_3).unwrap(), before);
    // A window set under policy 4 states the page its prompt budget fits, and nothing else
    // differs.
    let fitted = before
        .replace(
            "200 lines and 32 KiB",
            &format!("200 lines and {FITTED_PAGE_AT_128K}"),
        )
        .replace("200 and 32 KiB", &format!("200 and {FITTED_PAGE_AT_128K}"));
    assert_ne!(fitted, before);
    let set = listed_bytes_under(&[], &[("PEN_CONTEXT_WINDOW_TOKENS", "128000")]);
    assert_eq!(String::from_utf8(set).unwrap(), fitted);
}

#[test]
fn the_catalog_states_the_page_a_small_window_fits() {
    // 16,000 − 4,096 − 2,560 = 9,344 tokens: pages of 9,344 × 4 ÷ 32 = 1,168 bytes.
    let vars = [("PEN_CONTEXT_WINDOW_TOKENS", "16000")];
    let catalog: Value = serde_json::from_slice(&listed_bytes_under(&[], &vars)).unwrap();
    assert!(description(&catalog, "pen_read").contains("200 lines and 1168 bytes"));
    // A window so small that the share is under the 1 KiB floor gets the floor.
    let vars = [("PEN_CONTEXT_WINDOW_TOKENS", "8000")];
    let catalog: Value = serde_json::from_slice(&listed_bytes_under(&[], &vars)).unwrap();
    assert!(description(&catalog, "pen_read").contains("200 lines and 1 KiB"));
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
    let policy_3 = listed_bytes_under(&[], &[("PEN_BUDGET_POLICY", "3")]);
    let policy_3: Value = serde_json::from_slice(&policy_3).unwrap();
    assert!(description(&policy_3, "pen_read").contains("200 lines and 32 KiB"));
}

#[test]
fn list_tools_follows_set_config() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 32 KiB"));
    client.request("pen/setConfig", json!({"context_window_tokens": 128_000}));
    let tools = client.request("pen/listTools", json!(null));
    let text = description(&tools, "pen_read");
    assert!(
        text.contains(&format!("200 lines and {FITTED_PAGE_AT_128K}")),
        "{text}"
    );
    client.request("pen/setConfig", json!({"budget_policy": 3}));
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 32 KiB"));
    client.request("pen/setConfig", json!({"max_tool_result_bytes": 4096}));
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 2 KiB"));
}
