//! Typed configuration and the one place every source of it is validated.
//!
//! Sources, later ones winning: `dirs::config_dir()/pen/config.toml`, `PEN_*` environment
//! variables, command-line flags, then the editor's `initializationOptions` and `pen/setConfig`.
//! Every source goes through [`Config::set`], so a key means the same thing and has the same
//! bounds wherever it is written. At boot an invalid value is reported and the default kept;
//! at run time it is refused.

use crate::limits::{Bounds, LimitError, Limits, MAX_TOOL_RESULT_BYTES};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown config key `{key}`; the keys are {known}")]
    UnknownKey { key: String, known: String },
    #[error("config key `{key}` must be {expected}, got {got}")]
    WrongType {
        key: String,
        expected: &'static str,
        got: String,
    },
    #[error(transparent)]
    OutOfRange(#[from] LimitError),
    #[error("cannot read {path}: {reason}")]
    File { path: PathBuf, reason: String },
}

/// The integer keys, each with its bounds. Adding a key means adding it here and to
/// [`Config`].
const INTEGER_KEYS: &[Bounds] = &[MAX_TOOL_RESULT_BYTES];

/// pen's settings, always within their bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub max_tool_result_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_tool_result_bytes: MAX_TOOL_RESULT_BYTES.default,
        }
    }
}

impl Config {
    /// Sets one key from a JSON value, checking its type and bounds. On error the config is
    /// unchanged.
    pub fn set(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        let (bounds, field) = self
            .integer_field(key)
            .ok_or_else(|| ConfigError::UnknownKey {
                key: key.to_string(),
                known: INTEGER_KEYS
                    .iter()
                    .map(|b| b.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let number = value.as_u64().ok_or_else(|| ConfigError::WrongType {
            key: key.to_string(),
            expected: "a whole number",
            got: value.to_string(),
        })?;
        *field = bounds.check(number)?;
        Ok(())
    }

    /// The bounds and storage of an integer key.
    fn integer_field(&mut self, key: &str) -> Option<(&'static Bounds, &mut u64)> {
        let bounds = INTEGER_KEYS.iter().find(|b| b.name == key)?;
        let field = match key {
            "max_tool_result_bytes" => &mut self.max_tool_result_bytes,
            _ => return None,
        };
        Some((bounds, field))
    }

    /// Sets every key of a JSON object, all or nothing.
    pub fn set_all(&mut self, values: &serde_json::Map<String, Value>) -> Result<(), ConfigError> {
        let mut next = self.clone();
        for (key, value) in values {
            next.set(key, value)?;
        }
        *self = next;
        Ok(())
    }

    /// Applies what can be applied of a boot-time source, returning one message per key that
    /// was refused (the default, or the earlier source's value, stays).
    pub fn apply_leniently(
        &mut self,
        source: &str,
        values: &serde_json::Map<String, Value>,
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        for (key, value) in values {
            if let Err(err) = self.set(key, value) {
                warnings.push(format!(
                    "{source}: {err}; keeping {key} = {}",
                    self.get(key)
                ));
            }
        }
        warnings
    }

    /// The value of a key as JSON (`null` for an unknown key).
    pub fn get(&self, key: &str) -> Value {
        self.to_json().get(key).cloned().unwrap_or(Value::Null)
    }

    /// Every key and its value.
    pub fn to_json(&self) -> Value {
        json!({ "max_tool_result_bytes": self.max_tool_result_bytes })
    }

    /// The tool limits this config implies.
    pub fn limits(&self) -> Limits {
        Limits {
            max_tool_result_bytes: self.max_tool_result_bytes as usize,
            ..Limits::default()
        }
    }

    /// The config at boot: defaults, then the config file, then `PEN_*` variables from `env`.
    /// Returns the config and a warning for each value that was refused.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> (Config, Vec<String>) {
        let mut config = Config::default();
        let mut warnings = Vec::new();
        if let Some(path) = file {
            match read_file(path) {
                Ok(Some(values)) => {
                    warnings.extend(config.apply_leniently(&path.display().to_string(), &values));
                }
                Ok(None) => {}
                Err(err) => warnings.push(err.to_string()),
            }
        }
        let env_values: serde_json::Map<String, Value> = env
            .into_iter()
            .filter_map(|(name, text)| {
                let key = name.strip_prefix("PEN_")?.to_ascii_lowercase();
                INTEGER_KEYS.iter().any(|b| b.name == key).then(|| {
                    let value = text
                        .trim()
                        .parse::<u64>()
                        .map_or(Value::String(text), Value::from);
                    (key, value)
                })
            })
            .collect();
        warnings.extend(config.apply_leniently("environment", &env_values));
        (config, warnings)
    }
}

/// The default config file: `dirs::config_dir()/pen/config.toml`.
pub fn default_config_file() -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join("pen").join("config.toml"))
}

/// The config file at boot: `PEN_CONFIG`, else the default path.
pub fn config_file() -> Option<PathBuf> {
    std::env::var_os("PEN_CONFIG")
        .map(PathBuf::from)
        .or_else(default_config_file)
}

/// Reads a TOML config file into JSON values; a missing file is `None`.
fn read_file(path: &Path) -> Result<Option<serde_json::Map<String, Value>>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::File {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let value = serde_json::to_value(table).map_err(|e| ConfigError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(value.as_object().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_checks_key_type_and_bounds() {
        let mut config = Config::default();
        config.set("max_tool_result_bytes", &json!(2048)).unwrap();
        assert_eq!(config.max_tool_result_bytes, 2048);
        let err = config.set("max_tool_result_bytes", &json!(10)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_tool_result_bytes = 10 is out of range: it must be between 1024 and 1048576"
        );
        let err = config
            .set("max_tool_result_bytes", &json!("big"))
            .unwrap_err();
        assert!(err.to_string().contains("must be a whole number"));
        let err = config.set("nope", &json!(1)).unwrap_err();
        assert!(err.to_string().contains("unknown config key `nope`"));
        assert_eq!(config.max_tool_result_bytes, 2048);
    }

    #[test]
    fn set_all_is_all_or_nothing() {
        let mut config = Config::default();
        let values = json!({"max_tool_result_bytes": 4096, "bogus": 1});
        assert!(config.set_all(values.as_object().unwrap()).is_err());
        assert_eq!(config, Config::default());
    }

    #[test]
    fn boot_sources_layer_and_bad_values_keep_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "max_tool_result_bytes = 4096\n").unwrap();
        let (config, warnings) = Config::load(Some(&file), Vec::new());
        assert_eq!(config.max_tool_result_bytes, 4096);
        assert!(warnings.is_empty());

        let env = vec![("PEN_MAX_TOOL_RESULT_BYTES".to_string(), "8192".to_string())];
        let (config, _) = Config::load(Some(&file), env);
        assert_eq!(config.max_tool_result_bytes, 8192);

        let env = vec![("PEN_MAX_TOOL_RESULT_BYTES".to_string(), "5".to_string())];
        let (config, warnings) = Config::load(Some(&file), env);
        assert_eq!(config.max_tool_result_bytes, 4096);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("between 1024 and 1048576"),
            "{warnings:?}"
        );

        std::fs::write(&file, "max_tool_result_bytes = [").unwrap();
        let (config, warnings) = Config::load(Some(&file), Vec::new());
        assert_eq!(config, Config::default());
        assert!(warnings[0].contains("config.toml"), "{warnings:?}");

        let (config, warnings) = Config::load(Some(&dir.path().join("missing.toml")), Vec::new());
        assert_eq!(config, Config::default());
        assert!(warnings.is_empty());
    }
}
