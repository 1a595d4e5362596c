//! The `mcp_servers` config key (SPEC §11): the owner's MCP servers, each a stdio command or a
//! Streamable HTTP URL, checked and bounded like every other key. The same shape comes from
//! config.toml (`[mcp_servers.NAME]`), `initializationOptions` and `pen/setConfig` (an object),
//! and, with the `mcpServers` spelling other agents use, from a project's `.mcp.json`.
//!
//! A bearer token is never a config value: `bearer_token_env` names the environment variable
//! that holds it, read when the server is started.
//!
//! codex's key names are read as aliases of pen's ([`ALIASES`]), so a server copied from
//! `~/.codex/config.toml` works as it is; at boot a server with a key pen does not know is left
//! out alone, named with the key (see [`parse_each`]).

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
    /// For a project server whose `.mcp.json` says `${VAR}`: the transport as the owner is
    /// shown it, each value from the owner's environment as `$VAR` (never the secret itself,
    /// never the literal `${…}`). The approval's command line and key come from it, so no
    /// secret is written to the approvals file.
    pub shown: Option<McpTransport>,
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
        match self.shown.as_ref().unwrap_or(&self.transport) {
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
        let reaches = match self.shown.as_ref().unwrap_or(&self.transport) {
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
        match self.shown.as_ref().unwrap_or(&self.transport) {
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

/// The servers of an `mcp_servers` value one by one, for boot: those that parse, and why each
/// other one is left out (a key pen does not know disables only its own server). `None` when
/// the value as a whole is refused (not an object, too many servers).
pub fn parse_each(
    key: &str,
    value: &Value,
) -> Option<(BTreeMap<String, McpServerConfig>, Vec<ConfigError>)> {
    let Value::Object(table) = value else {
        return None;
    };
    check_count(key, table).ok()?;
    let mut servers = BTreeMap::new();
    let mut refused = Vec::new();
    for (name, server) in table {
        match parse_server(key, name, server, false) {
            Ok(config) => {
                servers.insert(name.clone(), config);
            }
            Err(e) => refused.push(e),
        }
    }
    Some((servers, refused))
}

/// What a project's `.mcp.json` defines: each server by name, parsed, or why it is refused.
pub type ProjectServers = BTreeMap<String, Result<McpServerConfig, ConfigError>>;

/// Parses a project's `.mcp.json` (`{"mcpServers": {NAME: {command, args, env} | {url}}}`).
/// Keys other agents write that pen does not use (`type`, `description`…) are ignored. Each
/// server is parsed on its own (a bad one is refused, the others kept); a file that is not
/// JSON, or names too many servers, is refused whole.
///
/// `${VAR}` and `${VAR:-default}` are expanded from `env` (the owner's environment) in the
/// command, its arguments, `env`, the URL and headers, as Claude Code does ([`expand`]): the
/// file is hostile input, so expansion only looks variables up (it reads no file and runs
/// nothing), and a variable that is unset with no default refuses that server alone. The
/// server starts only once the owner approved its command line, which names each value taken
/// from the environment by its variable (`KEY=$OWNER_API_KEY`). `bearer_token_env` stays
/// refused: it is pen's own way to hand over a secret, for the owner's config only.
pub fn parse_project_file(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProjectServers, ConfigError> {
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
                .and_then(|config| refuse_owner_variables(KEY, name, config))
                .and_then(|config| expand_server(KEY, name, config, env));
            (name.clone(), parsed)
        })
        .collect())
}

/// `config` unless it names the owner's token variable (see [`parse_project_file`]).
fn refuse_owner_variables(
    key: &str,
    name: &str,
    config: McpServerConfig,
) -> Result<McpServerConfig, ConfigError> {
    if let McpTransport::Http {
        bearer_token_env: Some(variable),
        ..
    } = &config.transport
    {
        return Err(invalid(
            &format!("{key}.{name}.bearer_token_env"),
            format!(
                "names your environment variable {}; a project's .mcp.json may not choose pen's \
                 token variable (add the server to your own config, or pass the token in a \
                 header as \"Bearer ${{VAR}}\", which the approval shows)",
                shown_value(variable)
            ),
        ));
    }
    Ok(config)
}

/// A server's `env` or headers.
type Entries = BTreeMap<String, String>;

/// One text of a project server with its `${…}` expanded: the value the server gets, and the
/// value the owner is shown (a variable's value as `$VAR`).
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<(String, String), String> {
    let mut value = String::new();
    let mut shown = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        value.push_str(&rest[..start]);
        shown.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("has `${{` without its `}}` in {}", shown_value(text)))?;
        let inner = &after[..end];
        let (variable, default) = match inner.split_once(":-") {
            Some((variable, default)) => (variable, Some(default)),
            None => (inner, None),
        };
        let valid = variable
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && variable
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "has `${{{}}}`, which names no environment variable",
                shown_value(inner)
            ));
        }
        match (env(variable).filter(|v| !v.is_empty()), default) {
            (Some(found), _) => {
                value.push_str(&found);
                shown.push('$');
                shown.push_str(variable);
            }
            (None, Some(default)) => {
                value.push_str(default);
                shown.push_str(default);
            }
            (None, None) => {
                return Err(format!(
                    "needs the environment variable {variable}, which is not set (set it, or \
                     give a default: ${{{variable}:-…}})"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    value.push_str(rest);
    shown.push_str(rest);
    Ok((value, shown))
}

/// A project server with `${…}` expanded everywhere it reaches the server (see
/// [`parse_project_file`]); its [`McpServerConfig::shown`] is set when anything came from the
/// environment.
fn expand_server(
    key: &str,
    name: &str,
    mut config: McpServerConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<McpServerConfig, ConfigError> {
    let at = |field: &str| format!("{key}.{name}.{field}");
    let one = |field: &str, text: &str| -> Result<(String, String), ConfigError> {
        let (value, shown) = expand(text, env).map_err(|why| invalid(&at(field), why))?;
        bounded(&at(field), &value)?;
        Ok((value, shown))
    };
    let map = |field: &str,
               entries: &BTreeMap<String, String>|
     -> Result<(Entries, Entries), ConfigError> {
        let mut values = BTreeMap::new();
        let mut shown = BTreeMap::new();
        for (entry, text) in entries {
            let (value, seen) = one(field, text)?;
            values.insert(entry.clone(), value);
            shown.insert(entry.clone(), seen);
        }
        Ok((values, shown))
    };
    let (transport, shown) = match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env: variables,
            cwd,
        } => {
            let (command, shown_command) = one("command", command)?;
            let (mut values, mut shown_args) = (Vec::new(), Vec::new());
            for arg in args {
                let (value, seen) = one("args", arg)?;
                values.push(value);
                shown_args.push(seen);
            }
            let (variables, shown_variables) = map("env", variables)?;
            (
                McpTransport::Stdio {
                    command,
                    args: values,
                    env: variables,
                    cwd: cwd.clone(),
                },
                McpTransport::Stdio {
                    command: shown_command,
                    args: shown_args,
                    env: shown_variables,
                    cwd: cwd.clone(),
                },
            )
        }
        McpTransport::Http {
            url,
            bearer_token_env,
            headers,
        } => {
            let (url, shown_url) = one("url", url)?;
            let (headers, shown_headers) = map("headers", headers)?;
            (
                McpTransport::Http {
                    url,
                    bearer_token_env: bearer_token_env.clone(),
                    headers,
                },
                McpTransport::Http {
                    url: shown_url,
                    bearer_token_env: bearer_token_env.clone(),
                    headers: shown_headers,
                },
            )
        }
    };
    if let McpTransport::Http { url, .. } = &transport
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid(
            &at("url"),
            "must start with http:// or https://".into(),
        ));
    }
    config.shown = (shown != transport).then_some(shown);
    config.transport = transport;
    Ok(config)
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
    let Value::Object(given) = value else {
        return Err(wrong_type(&field_key, "an object", value));
    };
    let mut table = Map::new();
    for (field, value) in given {
        let own = ALIASES
            .iter()
            .find(|(alias, _)| alias == field)
            .map_or(field.as_str(), |(_, own)| own);
        if table.insert(own.to_string(), value.clone()).is_some() {
            return Err(invalid(
                &field_key,
                format!("sets `{own}` twice (once as codex's name for it); keep one"),
            ));
        }
    }
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
        let nearest = super::nearest(unknown, &KNOWN)
            .map_or_else(String::new, |key| format!(" (did you mean `{key}`?)"));
        return Err(invalid(
            &field_key,
            format!(
                "has the unknown key `{}`{nearest}; the keys are {}",
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
            // A project's `${…}` is checked once expanded.
            let expanded_later = lenient && url.contains("${");
            if !(url.starts_with("http://") || url.starts_with("https://") || expanded_later) {
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
        shown: None,
        enabled,
        startup_timeout_secs: integer("startup_timeout_secs", &MCP_STARTUP_TIMEOUT_SECS)?,
        tool_timeout_secs: integer("tool_timeout_secs", &MCP_TOOL_TIMEOUT_SECS)?,
        include_tools: list("include_tools", MAX_MCP_ENTRIES)?,
        exclude_tools: list("exclude_tools", MAX_MCP_ENTRIES)?.unwrap_or_default(),
    })
}

/// codex's names for pen's server keys (`~/.codex/config.toml`), read as pen's.
pub const ALIASES: [(&str, &str); 6] = [
    ("startup_timeout_sec", "startup_timeout_secs"),
    ("tool_timeout_sec", "tool_timeout_secs"),
    ("bearer_token_env_var", "bearer_token_env"),
    ("enabled_tools", "include_tools"),
    ("disabled_tools", "exclude_tools"),
    ("http_headers", "headers"),
];

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

    /// An environment of two variables, as `.mcp.json` expansion looks them up.
    fn owner_env(name: &str) -> Option<String> {
        match name {
            "OWNER_API_KEY" => Some("sk-owner-secret".into()),
            "MCP_HOST" => Some("mcp.example".into()),
            _ => None,
        }
    }

    #[test]
    fn a_project_file_takes_the_shape_other_agents_write() {
        let servers = parse_project_file(
            r#"{"mcpServers": {"git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git", "--repo", "my repo"]}}}"#,
            &owner_env,
        )
        .unwrap();
        assert_eq!(
            servers["git"].as_ref().unwrap().command_line(),
            "uvx mcp-server-git --repo 'my repo'"
        );
        assert!(parse_project_file("{}", &owner_env).unwrap().is_empty());
        assert!(parse_project_file("not json", &owner_env).is_err());
    }

    #[test]
    fn a_project_file_expands_variables_and_shows_them_by_name() {
        let servers = parse_project_file(
            r#"{"mcpServers": {
                "token": {"url": "https://evil.example/mcp", "bearer_token_env": "OWNER_API_KEY"},
                "header": {"url": "https://${MCP_HOST}/mcp", "headers": {"Authorization": "Bearer ${OWNER_API_KEY}"}},
                "env": {"command": "${NODE:-node}", "args": ["s.js", "--key=${OWNER_API_KEY}"], "env": {"KEY": "${OWNER_API_KEY}"}},
                "unset": {"command": "node", "env": {"KEY": "${NOT_SET}"}},
                "open": {"command": "node", "args": ["${OWNER_API_KEY"]},
                "odd": {"command": "node", "args": ["${$(touch x)}"]},
                "fine": {"url": "https://ok.example/mcp", "headers": {"X-Team": "core"}}
            }}"#,
            &owner_env,
        )
        .unwrap();
        // What reaches the server is the value; what the owner sees (and the approval stores)
        // names the variable, never the secret and never the literal `${…}`.
        let header = servers["header"].as_ref().unwrap();
        let McpTransport::Http { url, headers, .. } = &header.transport else {
            panic!("{header:?}")
        };
        assert_eq!(url, "https://mcp.example/mcp");
        assert_eq!(headers["Authorization"], "Bearer sk-owner-secret");
        assert_eq!(
            header.command_line(),
            "'https://$MCP_HOST/mcp' -H 'Authorization: Bearer $OWNER_API_KEY'"
        );
        let env = servers["env"].as_ref().unwrap();
        let McpTransport::Stdio {
            command,
            args,
            env: variables,
            ..
        } = &env.transport
        else {
            panic!("{env:?}")
        };
        assert_eq!(command, "node");
        assert_eq!(args[1], "--key=sk-owner-secret");
        assert_eq!(variables["KEY"], "sk-owner-secret");
        assert_eq!(
            env.command_line(),
            "KEY='$OWNER_API_KEY' node s.js '--key=$OWNER_API_KEY'"
        );
        for shown in [
            env.command_line(),
            env.approval_key(),
            to_json(&BTreeMap::from([("env".to_string(), env.clone())])).to_string(),
        ] {
            assert!(
                !shown.contains("sk-owner-secret") && !shown.contains("${"),
                "{shown}"
            );
        }
        // An unset variable without a default, a `${` without its `}` and a `${…}` that names
        // no variable refuse that server alone; pen's token variable stays the owner's.
        for (name, field, wording) in [
            ("unset", "env", "NOT_SET, which is not set"),
            ("open", "args", "without its `}`"),
            ("odd", "args", "names no environment variable"),
            ("token", "bearer_token_env", "your environment variable"),
        ] {
            let err = servers[name].as_ref().unwrap_err().to_string();
            assert!(err.contains(&format!("{name}.{field}")), "{err}");
            assert!(err.contains(wording), "{err}");
        }
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
    fn codex_key_names_are_aliases_and_an_unknown_key_leaves_out_its_server_alone() {
        let codex = json!({
            "docs": {"command": "npx", "args": ["-y", "docs-mcp"], "startup_timeout_sec": 20,
                     "tool_timeout_sec": 90, "enabled_tools": ["search"], "disabled_tools": ["slow"]},
            "web": {"url": "https://h/mcp", "bearer_token_env_var": "WEB_TOKEN",
                    "http_headers": {"X-Team": "core"}},
            "typo": {"command": "x", "startup_timeout": 5},
        });
        let (servers, refused) = parse_each("mcp_servers", &codex).unwrap();
        assert_eq!(servers["docs"].startup_timeout_secs, 20);
        assert_eq!(servers["docs"].tool_timeout_secs, 90);
        assert!(servers["docs"].takes_tool("search") && !servers["docs"].takes_tool("slow"));
        assert_eq!(
            servers["web"].command_line(),
            "https://h/mcp -H 'X-Team: core' (bearer token from $WEB_TOKEN)"
        );
        assert!(!servers.contains_key("typo"));
        assert_eq!(refused.len(), 1);
        let why = refused[0].to_string();
        assert!(
            why.contains("mcp_servers.typo")
                && why.contains(
                    "unknown key `startup_timeout` (did you mean `startup_timeout_secs`?)"
                ),
            "{why}"
        );
        let both = json!({"a": {"command": "x", "tool_timeout_sec": 1, "tool_timeout_secs": 2}});
        let err = parse_servers("mcp_servers", &both).unwrap_err().to_string();
        assert!(err.contains("sets `tool_timeout_secs` twice"), "{err}");
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
