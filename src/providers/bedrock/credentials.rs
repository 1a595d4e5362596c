//! AWS credentials and region for Bedrock, from the standard environment variables and, failing
//! those, the shared `~/.aws/credentials` and `~/.aws/config` files (static keys only: no SSO,
//! no `credential_process`, no assumed roles, no instance metadata).
//!
//! Lookups take the environment as a function so tests never touch the process environment.

use crate::providers::{ErrorKind, ProviderError};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Static AWS credentials. `Debug` shows only the access key id: the secret and the session
/// token never reach a log or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl AwsCredentials {
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> AwsCredentials {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        }
    }

    /// The process's credentials: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+
    /// `AWS_SESSION_TOKEN`), else the `AWS_PROFILE` (default `default`) section of
    /// `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`).
    pub fn from_environment() -> Result<AwsCredentials, ProviderError> {
        AwsCredentials::resolve(
            &|name| std::env::var(name).ok(),
            dirs::home_dir().as_deref(),
        )
    }

    fn resolve(
        env: &dyn Fn(&str) -> Option<String>,
        home: Option<&Path>,
    ) -> Result<AwsCredentials, ProviderError> {
        let env = |name: &str| env(name).filter(|value| !value.is_empty());
        if let (Some(access_key_id), Some(secret_access_key)) =
            (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"))
        {
            return Ok(AwsCredentials::new(
                access_key_id,
                secret_access_key,
                env("AWS_SESSION_TOKEN"),
            ));
        }
        let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
        let path = env("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| home.map(|home| home.join(".aws/credentials")));
        let section = path
            .as_deref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| parse_ini(&text).remove(&profile));
        let missing = || {
            ProviderError::new(
                ErrorKind::Config,
                format!(
                    "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                     put aws_access_key_id and aws_secret_access_key in the [{profile}] section \
                     of ~/.aws/credentials"
                ),
            )
        };
        let mut section = section.ok_or_else(missing)?;
        match (
            section.remove("aws_access_key_id"),
            section.remove("aws_secret_access_key"),
        ) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(AwsCredentials::new(
                access_key_id,
                secret_access_key,
                section.remove("aws_session_token"),
            )),
            _ => Err(missing()),
        }
    }

    /// The secret parts, for scrubbing provider messages that might echo them back.
    pub(super) fn secrets(&self) -> impl Iterator<Item = &str> {
        [
            Some(self.access_key_id.as_str()),
            Some(self.secret_access_key.as_str()),
            self.session_token.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|secret| !secret.is_empty())
    }
}

/// The process's region: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the `region` of the
/// `AWS_PROFILE` profile in `AWS_CONFIG_FILE` (default `~/.aws/config`).
pub fn region_from_environment() -> Option<String> {
    resolve_region(
        &|name| std::env::var(name).ok(),
        dirs::home_dir().as_deref(),
    )
}

fn resolve_region(env: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Option<String> {
    let env = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(region) = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")) {
        return Some(region);
    }
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
    // In the config file every profile but `default` is spelled `[profile NAME]`.
    let section = if profile == "default" {
        profile
    } else {
        format!("profile {profile}")
    };
    let path = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home.map(|home| home.join(".aws/config")))?;
    let text = std::fs::read_to_string(path).ok()?;
    parse_ini(&text).remove(&section)?.remove("region")
}

/// Reads the INI dialect of the AWS shared files: `[section]` headers, `key = value` lines,
/// `#` and `;` comment lines. Keys are lower-cased, as the AWS tools treat them; indented lines
/// (nested `s3 =` blocks) belong to a sub-setting and are skipped.
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_string();
            sections.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(section), Some((key, value))) = (&current, line.split_once('=')) {
            sections
                .entry(section.clone())
                .or_default()
                .insert(key.trim().to_lowercase(), value.trim().to_string());
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    const CREDENTIALS_FILE: &str = "\
# a comment
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = default/secret

[work]
AWS_ACCESS_KEY_ID=AKIDWORK
aws_secret_access_key=work+secret
aws_session_token = work-token
";

    const CONFIG_FILE: &str = "\
[default]
region = eu-west-1
s3 =
  region = not-this-one
[profile work]
region = ap-south-1
";

    fn home_with_files() -> tempfile::TempDir {
        let home = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(home.path().join(".aws")).expect("mkdir");
        std::fs::write(home.path().join(".aws/credentials"), CREDENTIALS_FILE).expect("write");
        std::fs::write(home.path().join(".aws/config"), CONFIG_FILE).expect("write");
        home
    }

    #[test]
    fn environment_variables_win_over_the_files() {
        let home = home_with_files();
        let env = env_of(&[
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_SESSION_TOKEN", "env-token"),
            ("AWS_DEFAULT_REGION", "us-west-2"),
        ]);
        assert_eq!(
            AwsCredentials::resolve(&env, Some(home.path())),
            Ok(AwsCredentials::new(
                "AKIDENV",
                "env-secret",
                Some("env-token".into())
            ))
        );
        assert_eq!(
            resolve_region(&env, Some(home.path())).as_deref(),
            Some("us-west-2")
        );
    }

    #[test]
    fn profiles_come_from_the_shared_files() {
        let home = home_with_files();
        let default = env_of(&[]);
        assert_eq!(
            AwsCredentials::resolve(&default, Some(home.path())),
            Ok(AwsCredentials::new("AKIDDEFAULT", "default/secret", None))
        );
        assert_eq!(
            resolve_region(&default, Some(home.path())).as_deref(),
            Some("eu-west-1")
        );
        let work = env_of(&[("AWS_PROFILE", "work")]);
        assert_eq!(
            AwsCredentials::resolve(&work, Some(home.path())),
            Ok(AwsCredentials::new(
                "AKIDWORK",
                "work+secret",
                Some("work-token".into())
            ))
        );
        assert_eq!(
            resolve_region(&work, Some(home.path())).as_deref(),
            Some("ap-south-1")
        );
    }

    #[test]
    fn missing_credentials_are_a_config_error_naming_the_profile() {
        let home = home_with_files();
        let env = env_of(&[("AWS_PROFILE", "absent"), ("AWS_ACCESS_KEY_ID", "AKIDHALF")]);
        let error = AwsCredentials::resolve(&env, Some(home.path())).expect_err("no profile");
        assert_eq!(error.kind, ErrorKind::Config);
        assert!(error.message.contains("[absent]"), "{}", error.message);
        assert_eq!(resolve_region(&env, None), None);
    }

    #[test]
    fn debug_output_hides_the_secrets() {
        let credentials = AwsCredentials::new("AKIDSHOWN", "hidden-secret", Some("tok".into()));
        let shown = format!("{credentials:?}");
        assert!(shown.contains("AKIDSHOWN"));
        assert!(
            !shown.contains("hidden-secret") && !shown.contains("tok\""),
            "{shown}"
        );
    }
}
