//! Configuration as Modal's SDKs read it (provider facts §A1): each setting from its environment
//! variable, else from the profile with `active = true` in `~/.modal.toml` (or the file
//! `MODAL_CONFIG_PATH` names).

use std::path::PathBuf;

use serde::Deserialize;

use crate::contract::error::{Result, SandboxError};

/// The provider's name in errors.
pub const PROVIDER: &str = "Modal";
/// The SDKs' control plane.
pub const DEFAULT_SERVER_URL: &str = "https://api.modal.com:443";
pub const ENV_SERVER_URL: &str = "MODAL_SERVER_URL";
pub const ENV_TOKEN_ID: &str = "MODAL_TOKEN_ID";
pub const ENV_TOKEN_SECRET: &str = "MODAL_TOKEN_SECRET";
pub const ENV_ENVIRONMENT: &str = "MODAL_ENVIRONMENT";
pub const ENV_IMAGE_BUILDER_VERSION: &str = "MODAL_IMAGE_BUILDER_VERSION";
pub const ENV_CONFIG_PATH: &str = "MODAL_CONFIG_PATH";
/// Both token variables, as errors name them.
pub const TOKEN_VARIABLES: &str = "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET";

/// Where the control plane is and who is calling.
#[derive(Clone, PartialEq, Eq)]
pub struct ModalConfig {
    /// `https://…` (TLS) or `http://…` (plaintext h2c).
    pub server_url: String,
    pub token_id: String,
    pub token_secret: String,
    /// The Modal environment; `None`: the workspace's default.
    pub environment: Option<String>,
    /// `None`: asked of the environment's settings.
    pub image_builder_version: Option<String>,
}

impl std::fmt::Debug for ModalConfig {
    // The secret stays out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalConfig")
            .field("server_url", &self.server_url)
            .field("token_id", &self.token_id)
            .field("environment", &self.environment)
            .field("image_builder_version", &self.image_builder_version)
            .finish_non_exhaustive()
    }
}

/// One profile of `~/.modal.toml` (a table per profile name).
#[derive(Debug, Default, Deserialize)]
struct Profile {
    #[serde(default)]
    active: bool,
    server_url: Option<String>,
    token_id: Option<String>,
    token_secret: Option<String>,
    environment: Option<String>,
    image_builder_version: Option<String>,
}

impl ModalConfig {
    pub fn new(
        server_url: impl Into<String>,
        token_id: impl Into<String>,
        token_secret: impl Into<String>,
    ) -> Self {
        Self {
            server_url: server_url.into(),
            token_id: token_id.into(),
            token_secret: token_secret.into(),
            environment: None,
            image_builder_version: None,
        }
    }

    /// From this process's environment and the config file.
    pub fn from_env() -> Result<Self> {
        let env = |name: &str| std::env::var(name).ok();
        let path = match env(ENV_CONFIG_PATH).filter(|p| !p.is_empty()) {
            Some(path) => Some(PathBuf::from(path)),
            None => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".modal.toml")),
        };
        let file = match &path {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => Some((path.display().to_string(), text)),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                Err(err) => {
                    return Err(SandboxError::Provider {
                        provider: PROVIDER,
                        status: None,
                        message: format!("cannot read {}: {err}", path.display()),
                    });
                }
            },
            None => None,
        };
        Self::resolve(env, file.as_ref().map(|(p, t)| (p.as_str(), t.as_str())))
    }

    /// The precedence itself: `env` (a variable's value) over the active profile of `file`
    /// (`(path, text)`). Empty values count as unset.
    pub fn resolve(env: impl Fn(&str) -> Option<String>, file: Option<(&str, &str)>) -> Result<Self> {
        let profile = match file {
            Some((path, text)) => active_profile(path, text)?,
            None => Profile::default(),
        };
        let pick = |name: &str, fallback: &Option<String>| {
            env(name).filter(|v| !v.is_empty()).or_else(|| fallback.clone().filter(|v| !v.is_empty()))
        };
        let (Some(token_id), Some(token_secret)) =
            (pick(ENV_TOKEN_ID, &profile.token_id), pick(ENV_TOKEN_SECRET, &profile.token_secret))
        else {
            return Err(SandboxError::Provider {
                provider: PROVIDER,
                status: None,
                message: format!(
                    "no token: set {TOKEN_VARIABLES} (or run `modal token set`, which writes the active \
                     profile of ~/.modal.toml)"
                ),
            });
        };
        Ok(Self {
            server_url: pick(ENV_SERVER_URL, &profile.server_url)
                .unwrap_or_else(|| DEFAULT_SERVER_URL.to_owned()),
            token_id,
            token_secret,
            environment: pick(ENV_ENVIRONMENT, &profile.environment),
            image_builder_version: pick(ENV_IMAGE_BUILDER_VERSION, &profile.image_builder_version),
        })
    }
}

/// The profile with `active = true`; none active: no values from the file.
fn active_profile(path: &str, text: &str) -> Result<Profile> {
    let profiles: std::collections::BTreeMap<String, Profile> =
        toml::from_str(text).map_err(|e| SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("{path} is not valid: {e}"),
        })?;
    Ok(profiles.into_values().find(|p| p.active).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[work]
token_id = "ak-work"
token_secret = "as-work"
environment = "dev"

[personal]
active = true
token_id = "ak-personal"
token_secret = "as-personal"
server_url = "http://127.0.0.1:9"
"#;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_active_profile_fills_what_the_environment_leaves() {
        let config = ModalConfig::resolve(env_of(&[]), Some(("f", FILE))).unwrap();
        let mut expected = ModalConfig::new("http://127.0.0.1:9", "ak-personal", "as-personal");
        expected.environment = None;
        assert_eq!(config, expected);
    }

    #[test]
    fn variables_win_over_the_file_key_by_key() {
        let env =
            env_of(&[(ENV_TOKEN_ID, "ak-env"), (ENV_TOKEN_SECRET, "as-env"), (ENV_ENVIRONMENT, "prod")]);
        let config = ModalConfig::resolve(env, Some(("f", FILE))).unwrap();
        let mut expected = ModalConfig::new("http://127.0.0.1:9", "ak-env", "as-env");
        expected.environment = Some("prod".to_owned());
        assert_eq!(config, expected);
        let only_env =
            env_of(&[(ENV_TOKEN_ID, "a"), (ENV_TOKEN_SECRET, "b"), (ENV_IMAGE_BUILDER_VERSION, "2024.10")]);
        let config = ModalConfig::resolve(only_env, None).unwrap();
        assert_eq!(config.server_url, DEFAULT_SERVER_URL);
        assert_eq!(config.image_builder_version.as_deref(), Some("2024.10"));
    }

    #[test]
    fn a_missing_token_names_both_variables() {
        let inactive = "[p]\ntoken_id = \"ak\"\ntoken_secret = \"as\"\n";
        for (env, file) in [
            (env_of(&[]), None),
            (env_of(&[(ENV_TOKEN_ID, "ak")]), None),
            (env_of(&[(ENV_TOKEN_ID, ""), (ENV_TOKEN_SECRET, "")]), None),
            (env_of(&[]), Some(("f", inactive))),
        ] {
            let err = ModalConfig::resolve(env, file).unwrap_err().to_string();
            assert!(err.contains("MODAL_TOKEN_ID") && err.contains("MODAL_TOKEN_SECRET"), "{err}");
        }
        let err = ModalConfig::resolve(env_of(&[]), Some(("/x/.modal.toml", "not toml ["))).unwrap_err();
        assert!(err.to_string().contains("/x/.modal.toml"), "{err}");
    }

    #[test]
    fn the_secret_stays_out_of_debug() {
        let text = format!("{:?}", ModalConfig::new("http://x", "ak-1", "as-secret"));
        assert!(text.contains("ak-1") && !text.contains("as-secret"), "{text}");
    }
}
