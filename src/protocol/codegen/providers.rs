//! The editors' provider settings, generated from the provider facts table
//! (`providers::facts`) and checked like the protocol files: VS Code's `pen.provider` setting
//! (its values and their descriptions in `package.json`), Neovim's `pen.providers` table (read by
//! `:checkhealth pen`) and the provider list of its help.

use super::{UPDATE_COMMAND, check};
use crate::providers::ProviderKind;
use crate::providers::facts::ProviderFacts;
use std::fmt::Write as _;
use std::path::Path;

const PACKAGE_JSON_PATH: &str = "editors/vscode/package.json";
const LUA_PROVIDERS_PATH: &str = "editors/neovim/lua/pen/providers.lua";
const HELP_PATH: &str = "editors/neovim/doc/pen.txt";

/// The line of the Neovim help after which the generated provider list stands, up to the next
/// blank line.
const HELP_HEADING: &str =
    "Providers (`provider`): the variable each reads its key from, and where its";

fn rows() -> impl Iterator<Item = &'static ProviderFacts> {
    ProviderKind::ALL.into_iter().map(ProviderKind::facts)
}

fn committed(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap_or_default()
}

/// `package.json` with the `pen.provider` setting's values (empty: pen's own choice) and their
/// descriptions from the table; every other byte as committed.
fn package_json() -> String {
    let mut package: serde_json::Value =
        serde_json::from_str(&committed(PACKAGE_JSON_PATH)).expect("package.json is JSON");
    let setting = &mut package["contributes"]["configuration"]["properties"]["pen.provider"];
    let mut values = vec![serde_json::Value::from("")];
    let mut descriptions = vec![serde_json::Value::from(
        "pen chooses: its own config, else OpenAI when OPENAI_API_KEY is set, else a local Ollama.",
    )];
    for facts in rows() {
        values.push(facts.kind.as_str().into());
        let key = match facts.key_variable {
            Some(variable) => format!("Key: {variable}."),
            None => "No key variable.".to_string(),
        };
        let endpoint = facts.default_base_url;
        descriptions.push(
            format!(
                "{}. {key} Endpoint when base_url is unset: {endpoint}",
                facts.title
            )
            .into(),
        );
    }
    setting["enum"] = values.into();
    setting["enumDescriptions"] = descriptions.into();
    let mut text = serde_json::to_string_pretty(&package).expect("serializes");
    text.push('\n');
    text
}

/// A Lua string literal.
fn lua_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn lua() -> String {
    let mut out = format!(
        "--- pen's model providers, generated from src/providers/facts.rs; do not edit.\n\
         --- Update: {UPDATE_COMMAND}\n\
         --- For each `provider` value: the variable its key is read from (nil: none, or AWS's own\n\
         --- credentials) and where its requests go when `base_url` is unset.\n\
         return {{\n"
    );
    for facts in rows() {
        let key = facts.key_variable.map_or("nil".to_string(), lua_string);
        let _ = writeln!(
            out,
            "  {} = {{ key_variable = {key}, default_base_url = {}, title = {} }},",
            facts.kind.as_str(),
            lua_string(facts.default_base_url),
            lua_string(facts.title)
        );
    }
    out.push_str("}\n");
    out
}

/// The committed help with the lines after [`HELP_HEADING`], up to the next blank line,
/// replaced by the table.
fn help() -> String {
    let doc = committed(HELP_PATH);
    let mut out = String::new();
    let mut lines = doc.split_inclusive('\n');
    for line in lines.by_ref() {
        out.push_str(line);
        if line.trim_end() == HELP_HEADING {
            break;
        }
    }
    out.push_str("requests go when `base_url` is unset:\n");
    for facts in rows() {
        let key = facts.key_variable.unwrap_or("(no key variable)");
        let _ = writeln!(
            out,
            "    {:<11} {:<19} {}",
            facts.kind.as_str(),
            key,
            facts.default_base_url
        );
    }
    // The committed list ends at the first blank line after the heading.
    let mut rest = lines.skip_while(|line| !line.trim().is_empty());
    for line in rest.by_ref() {
        out.push_str(line);
    }
    out
}

#[test]
fn vscode_provider_setting_matches_the_facts() {
    check(PACKAGE_JSON_PATH, &package_json());
}

#[test]
fn neovim_providers_table_matches_the_facts() {
    check(LUA_PROVIDERS_PATH, &lua());
}

#[test]
fn neovim_help_lists_the_providers_of_the_facts() {
    assert!(
        committed(HELP_PATH)
            .lines()
            .any(|line| line == HELP_HEADING),
        "{HELP_PATH} lost the line the provider list follows: {HELP_HEADING}"
    );
    check(HELP_PATH, &help());
}
