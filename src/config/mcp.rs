//! The `mcp_servers` config key (SPEC §11): the owner's MCP servers, each a stdio command or a
//! Streamable HTTP URL, checked and bounded like every other key. The same shape comes from
//! config.toml (`[mcp_servers.NAME]`), `initializationOptions` and `pen/setConfig` (an object),
//! and, with the `mcpServers` spelling other agents use, from a project's `.mcp.json`.
//!
//! A bearer token is never a config value: `bearer_token_env` names the environment variable
//! that holds it, read when the server is started.

use super::{ConfigError, shown_value, wrong_type};
use crate::limits::{
    MAX_MCP_ARGS, MAX_MCP_ENTRIES, MAX_MCP_SERVER_NAME_BYTES, MAX_MCP_SERVERS, MAX_MCP_VALUE_BYTES,
    MCP_STARTUP_TIMEOUT_SECS, MCP_TOOL_TIMEOUT_SECS,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// How pen reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking newline-delimited JSON-RPC on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        url: String,
        /// The environment variable holding the bearer token, if the server wants one.
        bearer_token_env: Option<String>,
        headers: BTreeMap<String, String>,
    },
}

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub transport: McpTransport,
    pub enabled: bool,
    pub startup_timeout_secs: u64,
    pub tool_timeout_secs: u64,
    /// When set, only these tools (by the server's names) join pen's tools.
    pub include_tools: Option<Vec<String>>,
    /// These tools (by the server's names) never join.
    pub exclude_tools: Vec<String>,
}

impl McpServerConfig {
    /// The command line a project server's approval names: the command and its arguments, each
    /// quoted when it is not plain, then the environment it is given and its folder.
    pub fn command_line(&self) -> String {
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut words: Vec<String> = env
                    .iter()
                    .map(|(name, value)| format!("{name}={}", quote(value)))
                    .collect();
                words.push(quote(command));
                words.extend(args.iter().map(|arg| quote(arg)));
                let mut line = words.join(" ");
                if let Some(cwd) = cwd {
                    line.push_str(&format!(" (in {})", quote(cwd)));
                }
                line
            }
            McpTransport::Http {
                url,
                bearer_token_env,
                headers,
            } => {
                let mut words = vec![quote(url)];
                for (name, value) in headers {
                    words.push(format!("-H {}", quote(&format!("{name}: {value}"))));
                }
                if let Some(variable) = bearer_token_env {
                    words.push(format!("(bearer token from ${variable})"));
                }
                words.join(" ")
            }
        }
    }

    /// Everything of this server that reaches it, as one unambiguous text: what an owner's
    /// approval of a project server is keyed by, so that any change (the command, an argument,
    /// a variable's name or value, the folder; the URL, a header, the token's variable) asks
    /// again.
    pub fn approval_key(&self) -> String {
        let reaches = match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => json!({"command": command, "args": args, "env": env, "cwd": cwd}),
            McpTransport::Http {
                url,
                bearer_token_env,
                headers,
            } => json!({"url": url, "headers": headers, "bearer_token_env": bearer_token_env}),
        };
        reaches.to_string()
    }

    /// Whether the server's tool (by the server's name) is taken.
    pub fn takes_tool(&self, tool: &str) -> bool {
        let included = self
            .include_tools
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == tool));
        included && !self.exclude_tools.iter().any(|name| name == tool)
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                out.insert("command".into(), json!(command));
                out.insert("args".into(), json!(args));
                out.insert("env".into(), json!(env));
                if let Some(cwd) = cwd {
                    out.insert("cwd".into(), json!(cwd));
                }
            }
            McpTransport::Http {
                url,
                bearer_token_env,
                headers,
            } => {
                out.insert("url".into(), json!(url));
                if let Some(name) = bearer_token_env {
                    out.insert("bearer_token_env".into(), json!(name));
                }
                out.insert("headers".into(), json!(headers));
            }
        }
        out.insert("enabled".into(), json!(self.enabled));
        out.insert(
            "startup_timeout_secs".into(),
            json!(self.startup_timeout_secs),
        );
        out.insert("tool_timeout_secs".into(), json!(self.tool_timeout_secs));
        if let Some(include) = &self.include_tools {
            out.insert("include_tools".into(), json!(include));
        }
        out.insert("exclude_tools".into(), json!(self.exclude_tools));
        Value::Object(out)
    }
}

/// A word of a command line as a shell would need it to read it back.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Every server, by name, as `pen/getConfig` shows them.
pub fn to_json(servers: &BTreeMap<String, McpServerConfig>) -> Value {
    Value::Object(
        servers
            .iter()
            .map(|(name, server)| (name.clone(), server.to_json()))
            .collect(),
    )
}

/// Whether `name` may name a server: 1 to [`MAX_MCP_SERVER_NAME_BYTES`] bytes of
/// `[A-Za-z0-9_-]`, so that tool names built from it need no escaping, and without `__`, the
/// separator of `mcp__<server>__<tool>` (server `a__b`'s tool `t` would read as server `a`'s
/// tool `b__t`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MCP_SERVER_NAME_BYTES
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The server an `auto_approve` pattern `mcp__<server>__*` names, if `entry` is one.
pub fn pattern_server(entry: &str) -> Option<&str> {
    entry
        .strip_prefix("mcp__")?
        .strip_suffix("__*")
        .filter(|server| valid_server_name(server))
}

/// Parses the `mcp_servers` value: an object of server name → server table.
pub fn parse_servers(
    key: &str,
    value: &Value,
) -> Result<BTreeMap<String, McpServerConfig>, ConfigError> {
    let table = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(table) => table,
        other => return Err(wrong_type(key, "an object of server name → server", other)),
    };
    parse_table(key, table)
}

/// Parses an object of server name → server table, at most [`MAX_MCP_SERVERS`] of them.
fn parse_table(
    key: &str,
    table: &Map<String, Value>,
) -> Result<BTreeMap<String, McpServerConfig>, ConfigError> {
    check_count(key, table)?;
    table
        .iter()
        .map(|(name, server)| Ok((name.clone(), parse_server(key, name, server, false)?)))
        .collect()
}

/// What a project's `.mcp.json` defines: each server by name, parsed, or why it is refused.
pub type ProjectServers = BTreeMap<String, Result<McpServerConfig, ConfigError>>;

/// Parses a project's `.mcp.json` (`{"mcpServers": {NAME: {command, args, env} | {url}}}`).
/// Keys other agents write that pen does not use (`type`, `description`…) are ignored. Each
/// server is parsed on its own (a bad one is refused, the others kept); a file that is not
/// JSON, or names too many servers, is refused whole.
///
/// A project file never directs the owner's environment anywhere: a server that names one of
/// the owner's variables — `bearer_token_env`, or an `env` or header value `${NAME}` that other
/// agents fill from the environment — is refused. A cloned repository has no business choosing
/// which of the owner's secrets its server receives, and an approval dialog naming a variable
/// is easy to click through; the owner who wants it adds the server to their own config.
pub fn parse_project_file(text: &str) -> Result<ProjectServers, ConfigError> {
    const KEY: &str = ".mcp.json mcpServers";
    let value: Value =
        serde_json::from_str(text).map_err(|e| invalid(KEY, format!("is not JSON: {e}")))?;
    let servers = value.get("mcpServers").cloned().unwrap_or(Value::Null);
    let Value::Object(table) = servers else {
        return if servers.is_null() {
            Ok(BTreeMap::new())
        } else {
            Err(wrong_type(KEY, "an object", &servers))
        };
    };
    check_count(KEY, &table)?;
    Ok(table
        .iter()
        .map(|(name, server)| {
            let parsed = parse_server(KEY, name, server, true)
                .and_then(|config| refuse_owner_variables(KEY, name, config));
            (name.clone(), parsed)
        })
        .collect())
}

/// `config` unless it names a variable of the owner's environment (see [`parse_project_file`]).
fn refuse_owner_variables(
    key: &str,
    name: &str,
    config: McpServerConfig,
) -> Result<McpServerConfig, ConfigError> {
    let at = |field: &str| format!("{key}.{name}.{field}");
    let expands = |value: &String| value.contains("${");
    let refused =
        match &config.transport {
            McpTransport::Http {
                bearer_token_env: Some(variable),
                ..
            } => Some((
                at("bearer_token_env"),
                format!("names your environment variable {}", shown_value(variable)),
            )),
            McpTransport::Http { headers, .. } => headers
                .iter()
                .find(|(_, value)| expands(value))
                .map(|(header, _)| {
                    (
                        at("headers"),
                        format!("fills header {} from your environment", shown_value(header)),
                    )
                }),
            McpTransport::Stdio { env, .. } => {
                env.iter()
                    .find(|(_, value)| expands(value))
                    .map(|(variable, _)| {
                        (
                            at("env"),
                            format!("fills {} from your environment", shown_value(variable)),
                        )
                    })
            }
        };
    match refused {
        None => Ok(config),
        Some((key, what)) => Err(invalid(
            &key,
            format!(
                "{what}; a project's .mcp.json may not send your environment to its server \
                 (add the server to your own config to give it a secret)"
            ),
        )),
    }
}

/// Refuses a table of more than [`MAX_MCP_SERVERS`] servers.
fn check_count(key: &str, table: &Map<String, Value>) -> Result<(), ConfigError> {
    if table.len() > MAX_MCP_SERVERS {
        return Err(invalid(
            key,
            format!(
                "names {} servers; at most {MAX_MCP_SERVERS} are allowed",
                table.len()
            ),
        ));
    }
    Ok(())
}

fn invalid(key: &str, why: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        why,
    }
}

/// Parses one server's table. `lenient` ignores keys pen does not know (a `.mcp.json`).
fn parse_server(
    key: &str,
    name: &str,
    value: &Value,
    lenient: bool,
) -> Result<McpServerConfig, ConfigError> {
    if !valid_server_name(name) {
        return Err(invalid(
            key,
            format!(
                "has a server named `{}`; a server name is 1 to {MAX_MCP_SERVER_NAME_BYTES} characters of A-Z a-z 0-9 _ -, without `__`",
                shown_value(name)
            ),
        ));
    }
    let field_key = format!("{key}.{name}");
    let Value::Object(table) = value else {
        return Err(wrong_type(&field_key, "an object", value));
    };
    const KNOWN: [&str; 13] = [
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "bearer_token_env",
        "headers",
        "enabled",
        "startup_timeout_secs",
        "tool_timeout_secs",
        "include_tools",
        "exclude_tools",
        "type",
    ];
    if !lenient && let Some(unknown) = table.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(
            &field_key,
            format!(
                "has the unknown key `{}`; the keys are {}",
                shown_value(unknown),
                KNOWN.join(", ")
            ),
        ));
    }
    let at = |field: &str| format!("{field_key}.{field}");
    let string = |field: &str| -> Result<Option<String>, ConfigError> {
        match table.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => bounded(&at(field), s).map(Some),
            Some(other) => Err(wrong_type(&at(field), "a string", other)),
        }
    };
    let list = |field: &str, max: usize| -> Result<Option<Vec<String>>, ConfigError> {
        match table.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() > max {
                    return Err(invalid(
                        &at(field),
                        format!("has {} items; at most {max} are allowed", items.len()),
                    ));
                }
                items
                    .iter()
                    .map(|item| match item {
                        Value::String(s) => bounded(&at(field), s),
                        other => Err(wrong_type(&at(field), "a list of strings", other)),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(other) => Err(wrong_type(&at(field), "a list of strings", other)),
        }
    };
    let map = |field: &str| -> Result<BTreeMap<String, String>, ConfigError> {
        match table.get(field) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(entries)) => {
                if entries.len() > MAX_MCP_ENTRIES {
                    return Err(invalid(
                        &at(field),
                        format!(
                            "has {} entries; at most {MAX_MCP_ENTRIES} are allowed",
                            entries.len()
                        ),
                    ));
                }
                entries
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((bounded(&at(field), k)?, bounded(&at(field), s)?)),
                        other => Err(wrong_type(&at(field), "an object of strings", other)),
                    })
                    .collect()
            }
            Some(other) => Err(wrong_type(&at(field), "an object of strings", other)),
        }
    };
    let integer = |field: &str, bounds: &crate::limits::Bounds| -> Result<u64, ConfigError> {
        match table.get(field) {
            None | Some(Value::Null) => Ok(bounds.default),
            Some(value) => super::integer(&at(field), value, bounds),
        }
    };
    let enabled = match table.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(wrong_type(&at("enabled"), "true or false", other)),
    };
    let transport = match (string("command")?, string("url")?) {
        (Some(command), None) if command.trim().is_empty() => {
            return Err(invalid(
                &at("command"),
                "is empty; it names the program that runs the server".to_string(),
            ));
        }
        (Some(command), None) => McpTransport::Stdio {
            command,
            args: list("args", MAX_MCP_ARGS)?.unwrap_or_default(),
            env: map("env")?,
            cwd: string("cwd")?,
        },
        (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    &at("url"),
                    "must start with http:// or https://".to_string(),
                ));
            }
            McpTransport::Http {
                url,
                bearer_token_env: string("bearer_token_env")?,
                headers: map("headers")?,
            }
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                &field_key,
                "has both `command` and `url`; a server is one or the other".to_string(),
            ));
        }
        (None, None) => {
            return Err(invalid(
                &field_key,
                "needs `command` (a stdio server) or `url` (a Streamable HTTP server)".to_string(),
            ));
        }
    };
    Ok(McpServerConfig {
        transport,
        enabled,
        startup_timeout_secs: integer("startup_timeout_secs", &MCP_STARTUP_TIMEOUT_SECS)?,
        tool_timeout_secs: integer("tool_timeout_secs", &MCP_TOOL_TIMEOUT_SECS)?,
        include_tools: list("include_tools", MAX_MCP_ENTRIES)?,
        exclude_tools: list("exclude_tools", MAX_MCP_ENTRIES)?.unwrap_or_default(),
    })
}

fn bounded(key: &str, text: &str) -> Result<String, ConfigError> {
    if text.len() > MAX_MCP_VALUE_BYTES {
        return Err(ConfigError::TooLong {
            key: key.to_string(),
            len: text.len(),
            max: MAX_MCP_VALUE_BYTES,
        });
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stdio_and_an_http_server_parse_and_show_without_a_token() {
        let servers = parse_servers(
            "mcp_servers",
            &json!({
                "files": {"command": "node", "args": ["server.js", "stdio"], "env": {"A": "1"}},
                "web": {"url": "http://127.0.0.1:1/mcp", "bearer_token_env": "WEB_TOKEN",
                        "exclude_tools": ["slow"], "tool_timeout_secs": 5},
            }),
        )
        .unwrap();
        assert_eq!(servers["files"].command_line(), "A=1 node server.js stdio");
        assert!(servers["web"].takes_tool("fast"));
        assert!(!servers["web"].takes_tool("slow"));
        assert_eq!(servers["web"].tool_timeout_secs, 5);
        let shown = to_json(&servers).to_string();
        assert!(shown.contains("WEB_TOKEN"), "{shown}");
    }

    #[test]
    fn bad_servers_are_refused_naming_the_key() {
        for (value, expected) in [
            (json!({"a b": {"command": "x"}}), "server name"),
            (json!({"a__b": {"command": "x"}}), "without `__`"),
            (json!({"a": {"command": "x", "url": "http://h"}}), "both"),
            (json!({"a": {}}), "needs `command`"),
            (json!({"a": {"command": " "}}), "is empty"),
            (json!({"a": {"url": "file:///etc"}}), "http://"),
            (
                json!({"a": {"command": "x", "bogus": 1}}),
                "unknown key `bogus`",
            ),
            (
                json!({"a": {"command": "x", "tool_timeout_secs": 0}}),
                "tool_timeout_secs",
            ),
            (
                json!({"a": {"command": "x", "args": [1]}}),
                "mcp_servers.a.args",
            ),
            (
                json!({"a": {"command": "x".repeat(MAX_MCP_VALUE_BYTES + 1)}}),
                "limit",
            ),
        ] {
            let err = parse_servers("mcp_servers", &value)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{value}: {err}");
        }
        let many: Map<String, Value> = (0..=MAX_MCP_SERVERS)
            .map(|i| (format!("s{i}"), json!({"command": "x"})))
            .collect();
        assert!(parse_servers("mcp_servers", &Value::Object(many)).is_err());
    }

    #[test]
    fn a_project_file_takes_the_shape_other_agents_write() {
        let servers = parse_project_file(
            r#"{"mcpServers": {"git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git", "--repo", "my repo"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            servers["git"].as_ref().unwrap().command_line(),
            "uvx mcp-server-git --repo 'my repo'"
        );
        assert!(parse_project_file("{}").unwrap().is_empty());
        assert!(parse_project_file("not json").is_err());
    }

    #[test]
    fn a_project_file_never_names_the_owner_s_variables() {
        let servers = parse_project_file(
            r#"{"mcpServers": {
                "token": {"url": "https://evil.example/mcp", "bearer_token_env": "OWNER_API_KEY"},
                "header": {"url": "https://evil.example/mcp", "headers": {"Authorization": "Bearer ${OWNER_API_KEY}"}},
                "env": {"command": "node", "args": ["s.js"], "env": {"KEY": "${OWNER_API_KEY}"}},
                "bad": {"command": ""},
                "fine": {"url": "https://ok.example/mcp", "headers": {"X-Team": "core"}}
            }}"#,
        )
        .unwrap();
        for (name, field) in [
            ("token", "bearer_token_env"),
            ("header", "headers"),
            ("env", "env"),
        ] {
            let err = servers[name].as_ref().unwrap_err().to_string();
            assert!(err.contains(&format!("{name}.{field}")), "{err}");
            assert!(err.contains("your environment"), "{err}");
        }
        // One bad server leaves the others.
        assert!(servers["bad"].is_err());
        assert_eq!(
            servers["fine"].as_ref().unwrap().command_line(),
            "https://ok.example/mcp -H 'X-Team: core'"
        );
        // The owner's own config may name a variable.
        let own = parse_servers(
            "mcp_servers",
            &json!({"docs": {"url": "https://ok.example/mcp", "bearer_token_env": "DOCS_TOKEN"}}),
        )
        .unwrap();
        assert_eq!(
            own["docs"].command_line(),
            "https://ok.example/mcp (bearer token from $DOCS_TOKEN)"
        );
    }

    #[test]
    fn the_approval_key_changes_with_everything_that_reaches_the_server() {
        let base = json!({"command": "node", "args": ["s.js"], "env": {"A": "1"}, "cwd": "tools"});
        let http = json!({"url": "https://h/mcp", "headers": {"X": "1"}, "bearer_token_env": "T"});
        let key = |server: &Value| {
            parse_servers("mcp_servers", &json!({ "s": server })).unwrap()["s"].approval_key()
        };
        let changed = |server: &Value, field: &str, value: Value| {
            let mut server = server.clone();
            server[field] = value;
            key(&server)
        };
        for (server, field, value) in [
            (&base, "command", json!("nodejs")),
            (&base, "args", json!(["t.js"])),
            (&base, "env", json!({"A": "2"})),
            (&base, "env", json!({"B": "1"})),
            (&base, "cwd", json!("other")),
            (&http, "url", json!("https://h/mcp2")),
            (&http, "headers", json!({"X": "2"})),
            (&http, "headers", json!({"Y": "1"})),
            (&http, "bearer_token_env", json!("U")),
        ] {
            assert_ne!(
                key(server),
                changed(server, field, value.clone()),
                "{field} {value}"
            );
        }
        // An env entry whose name holds `=` is not another pair of entries.
        assert_ne!(
            changed(&base, "env", json!({"X=1 Y": "2"})),
            changed(&base, "env", json!({"X": "1", "Y": "2"}))
        );
        // Settings that do not reach the server keep the key.
        assert_eq!(key(&base), changed(&base, "tool_timeout_secs", json!(5)));
    }
}
