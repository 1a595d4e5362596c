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

#[test]
fn the_default_catalog_is_the_one_pen_has_always_listed() {
    // Written by `pen tool --list` before the registry existed, and rewritten only when a tool
    // joins the catalog or a description is changed on purpose (pen_find joined; pen_search's
    // argument descriptions stopped repeating its description): the same bytes with the window
    // unset (the default: a turn fits its pages to the window it finds), under budget policy
    // 3, and at a set window large enough that a page of
    // the cap's half and 200 lines fits three times in what the budget leaves
    // (`Limits::fitted_to_room`): from about 40,000 tokens up with the default output and
    // margin.
    let before = include_str!("../fixtures/catalog/default.json");
    assert_eq!(String::from_utf8(listed_bytes(&[])).unwrap(), before);
    let policy_3 = listed_bytes_under(&[], &[("PEN_BUDGET_POLICY", "3")]);
    assert_eq!(String::from_utf8(policy_3).unwrap(), before);
    for window in ["40000", "128000"] {
        let set = listed_bytes_under(&[], &[("PEN_CONTEXT_WINDOW_TOKENS", window)]);
        assert_eq!(String::from_utf8(set).unwrap(), before, "{window}");
    }
}

#[test]
fn the_catalog_states_the_page_a_small_window_fits() {
    // 16,000 − 4,096 output − 2,560 margin = 9,344 tokens of budget, less pen's system prompt
    // and the tool schemas (about 2,890): a third of the rest at 4 bytes a token, about 8.6 KB,
    // more than a typical source file.
    let page_at = |window: &str| {
        let vars = [("PEN_CONTEXT_WINDOW_TOKENS", window)];
        let catalog: Value = serde_json::from_slice(&listed_bytes_under(&[], &vars)).unwrap();
        let text = description(&catalog, "pen_read");
        let page = text
            .split("200 lines and ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("{text}"))
            .to_string();
        (text.to_string(), page)
    };
    let (text, page) = page_at("16000");
    let bytes: usize = page.parse().unwrap_or_else(|_| panic!("{text}"));
    assert!((8_000..9_500).contains(&bytes), "{text}");
    // 32,000: about 30 KB, just under the cap's half.
    let (text, page) = page_at("32000");
    let bytes: usize = page.parse().unwrap_or_else(|_| panic!("{text}"));
    assert!((28_000..32 * 1024).contains(&bytes), "{text}");
    // A window whose budget leaves little after the fixed parts gets the 1 KiB floor.
    let (text, _) = page_at("8000");
    assert!(text.contains("200 lines and 1 KiB"), "{text}");
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
    client.request("pen/setConfig", json!({"context_window_tokens": 16_000}));
    let tools = client.request("pen/listTools", json!(null));
    let text = description(&tools, "pen_read");
    assert!(!text.contains("200 lines and 32 KiB"), "{text}");
    assert!(text.contains(" bytes"), "{text}");
    // Either policy: the page is what the budget holds.
    client.request("pen/setConfig", json!({"budget_policy": 3}));
    let tools = client.request("pen/listTools", json!(null));
    assert_eq!(description(&tools, "pen_read"), text);
    client.request(
        "pen/setConfig",
        json!({"context_window_tokens": 128_000, "max_tool_result_bytes": 4096}),
    );
    let tools = client.request("pen/listTools", json!(null));
    assert!(description(&tools, "pen_read").contains("200 lines and 2 KiB"));
}
