//! The Daytona REST API (provider facts §B1–B3): configuration, authentication, the sandbox
//! lifecycle, preview URLs, and the errors a user can act on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;

use crate::adapters::capped::{JSON_BODY_MAX, read_capped};
use crate::contract::error::{Result, SandboxError};
use crate::contract::untrusted::check_id;

/// The provider's name in errors.
pub const PROVIDER: &str = "Daytona";
/// The SDKs' default API base.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";
/// Environment variables, as Daytona's own SDKs read them.
pub const ENV_API_KEY: &str = "DAYTONA_API_KEY";
pub const ENV_API_URL: &str = "DAYTONA_API_URL";
pub const ENV_TARGET: &str = "DAYTONA_TARGET";

/// Time one API call may take (a create returns before the sandbox is ready, so this is ample).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Time to open a TCP (and TLS) connection to the API or the toolbox.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of an idempotent call after a 5xx or a connection failure.
const RETRIES: u32 = 3;

/// Where the API is and who is calling.
#[derive(Clone)]
pub struct DaytonaConfig {
    pub api_key: String,
    /// The API base, e.g. [`DEFAULT_API_URL`].
    pub api_url: String,
    /// Region (`target` on create); `None`: the organisation's default.
    pub target: Option<String>,
}

impl std::fmt::Debug for DaytonaConfig {
    // The key stays out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaConfig")
            .field("api_url", &self.api_url)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl DaytonaConfig {
    pub fn new(api_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self { api_key: api_key.into(), api_url: api_url.into(), target: None }
    }

    /// `DAYTONA_API_KEY` (required), `DAYTONA_API_URL` (default [`DEFAULT_API_URL`]), `DAYTONA_TARGET`.
    pub fn from_env() -> Result<Self> {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let api_key = var(ENV_API_KEY).ok_or(SandboxError::MissingEnv(ENV_API_KEY))?;
        let api_url = var(ENV_API_URL).unwrap_or_else(|| DEFAULT_API_URL.to_owned());
        Ok(Self { api_key, api_url, target: var(ENV_TARGET) })
    }
}

/// A sandbox as the API describes it (only the fields the adapter reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRecord {
    pub id: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub error_reason: Option<String>,
    #[serde(default)]
    pub toolbox_proxy_url: Option<String>,
    #[serde(default)]
    pub labels: HashMap<String, String>,
    #[serde(default)]
    pub snapshot: Option<String>,
}

impl SandboxRecord {
    pub fn state(&self) -> &str {
        self.state.as_deref().unwrap_or("unknown")
    }
}

/// `GET /sandbox/{id}/ports/{port}/preview-url`.
#[derive(Debug, Clone, Deserialize)]
pub struct Preview {
    pub url: String,
    pub token: String,
}

/// An authenticated client of one API base.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    config: Arc<DaytonaConfig>,
    /// `config.api_url`, parsed once.
    base: Url,
}

/// `base` with `segments` appended, each one percent-encoded as a single path segment: an id or a
/// path from a provider or a user can never add, remove or climb segments. Every URL the adapter
/// builds goes through here. Empty, `.` and `..` segments are refused (the URL parser would drop
/// them silently, turning `sandbox/..` into `sandbox`).
pub(crate) fn join(base: &Url, segments: &[&str]) -> Result<Url> {
    if let Some(bad) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
        return Err(SandboxError::Protocol(format!("`{bad}` cannot be a URL path segment")));
    }
    let mut url = base.clone();
    {
        let mut path = url
            .path_segments_mut()
            .map_err(|()| SandboxError::Protocol(format!("`{base}` cannot be the base of a URL path")))?;
        path.pop_if_empty();
        // `push` encodes `/`, `%`, `?`, `#` and the rest that would end or split a segment.
        path.extend(segments);
    }
    Ok(url)
}

/// A URL from a provider or the configuration, parsed.
pub(crate) fn parse_url(text: &str, what: &str) -> Result<Url> {
    Url::parse(text).map_err(|e| {
        SandboxError::Protocol(format!(
            "{what} `{}` is not a URL: {e}",
            crate::contract::escape::escape_controls(text)
        ))
    })
}

/// The error a user can act on, from a failed response: 401 names the variable, 404 says what was
/// not found, anything else carries the provider's own `message`.
pub(crate) fn status_error(status: StatusCode, body: &str, what: &str) -> SandboxError {
    match status {
        StatusCode::UNAUTHORIZED => SandboxError::Auth { provider: PROVIDER, variable: ENV_API_KEY },
        StatusCode::NOT_FOUND => SandboxError::NotFound { provider: PROVIDER, what: what.to_owned() },
        _ => SandboxError::Provider {
            provider: PROVIDER,
            status: Some(status.as_u16()),
            message: format!("{what}: HTTP {}: {}", status.as_u16(), error_message(body)),
        },
    }
}

/// The `message` (or `error`) of an error body, else the body itself, shortened.
pub(crate) fn error_message(body: &str) -> String {
    #[derive(Deserialize)]
    struct ErrorBody {
        message: Option<serde_json::Value>,
        error: Option<serde_json::Value>,
    }
    let text = |v: serde_json::Value| match v {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody { message: Some(m), .. }) => text(m),
        Ok(ErrorBody { error: Some(e), .. }) => text(e),
        _ => body.trim().chars().take(500).collect(),
    }
}

fn transport_error(what: &str, err: &reqwest::Error) -> SandboxError {
    SandboxError::Provider {
        provider: PROVIDER,
        status: None,
        message: format!("{what}: {}", error_chain(err)),
    }
}

/// reqwest's error with its causes (the top level alone says only "error sending request").
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl Api {
    pub fn new(config: DaytonaConfig) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| transport_error("cannot build the HTTP client", &e))?;
        let base = parse_url(&config.api_url, ENV_API_URL)?;
        Ok(Self { http, config: Arc::new(config), base })
    }

    pub fn config(&self) -> &DaytonaConfig {
        &self.config
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// `{api}/sandbox/{id}/{rest…}`, the id checked for its shape first.
    fn sandbox_url(&self, id: &str, rest: &[&str]) -> Result<Url> {
        check_id(PROVIDER, id)?;
        let segments: Vec<&str> = ["sandbox", id].into_iter().chain(rest.iter().copied()).collect();
        join(&self.base, &segments)
    }

    /// One call; GET and DELETE are retried with backoff on 5xx and connection failures (the others
    /// are not idempotent). A non-2xx answer becomes [`status_error`]; the body, whatever the
    /// status, is read up to [`JSON_BODY_MAX`].
    async fn call(
        &self,
        method: Method,
        url: &Url,
        body: Option<&serde_json::Value>,
        what: &str,
    ) -> Result<String> {
        let idempotent = method == Method::GET || method == Method::DELETE;
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .bearer_auth(&self.config.api_key)
                .timeout(CALL_TIMEOUT);
            if let Some(body) = body {
                request = request.json(body);
            }
            let retry = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let bytes =
                        read_capped(response, JSON_BODY_MAX, what, |e| transport_error(what, e)).await?;
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    if status.is_success() {
                        return Ok(text);
                    }
                    let err = status_error(status, &text, what);
                    if !(idempotent && status.is_server_error() && attempt < RETRIES) {
                        return Err(err);
                    }
                    err
                }
                Err(err) if idempotent && attempt < RETRIES && (err.is_connect() || err.is_timeout()) => {
                    transport_error(what, &err)
                }
                Err(err) => return Err(transport_error(what, &err)),
            };
            attempt += 1;
            tracing::debug!("{what}: retrying in {delay:?} after: {retry}");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        url: &Url,
        body: Option<&serde_json::Value>,
        what: &str,
    ) -> Result<T> {
        let text = self.call(method, url, body, what).await?;
        serde_json::from_str(&text).map_err(|e| {
            let shown: String = text.chars().take(200).collect();
            SandboxError::Protocol(format!("{what}: unexpected answer from Daytona ({e}): {shown}"))
        })
    }

    /// `POST /sandbox`.
    pub async fn create(&self, body: &serde_json::Value) -> Result<SandboxRecord> {
        let url = join(&self.base, &["sandbox"])?;
        let record: SandboxRecord = self.call_json(Method::POST, &url, Some(body), "create sandbox").await?;
        check_id(PROVIDER, &record.id)?;
        Ok(record)
    }

    /// `GET /sandbox/{id}`.
    pub async fn get(&self, id: &str) -> Result<SandboxRecord> {
        let url = self.sandbox_url(id, &[])?;
        self.call_json(Method::GET, &url, None, &format!("sandbox {id}")).await
    }

    /// `POST /sandbox/{id}/start`.
    pub async fn start(&self, id: &str) -> Result<SandboxRecord> {
        let url = self.sandbox_url(id, &["start"])?;
        self.call_json(Method::POST, &url, None, &format!("sandbox {id}")).await
    }

    /// `POST /sandbox/{id}/stop`.
    pub async fn stop(&self, id: &str) -> Result<SandboxRecord> {
        let url = self.sandbox_url(id, &["stop"])?;
        self.call_json(Method::POST, &url, None, &format!("sandbox {id}")).await
    }

    /// `DELETE /sandbox/{id}`.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let url = self.sandbox_url(id, &[])?;
        self.call(Method::DELETE, &url, None, &format!("sandbox {id}")).await.map(drop)
    }

    /// `GET /sandbox?labels=…`, filtered here too (a server may ignore the filter). The ids are
    /// the provider's word: whoever uses one checks it ([`check_id`]), as every call here does.
    pub async fn list(&self, labels: &HashMap<String, String>) -> Result<Vec<SandboxRecord>> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Listing {
            Plain(Vec<SandboxRecord>),
            Paged { items: Vec<SandboxRecord> },
        }
        let filter = serde_json::to_string(labels).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let mut url = join(&self.base, &["sandbox"])?;
        url.query_pairs_mut().append_pair("labels", &filter);
        let all = match self.call_json(Method::GET, &url, None, "list sandboxes").await? {
            Listing::Plain(items) | Listing::Paged { items } => items,
        };
        Ok(all
            .into_iter()
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .filter(|s| !matches!(s.state(), "destroyed" | "destroying"))
            .collect())
    }

    /// `GET /sandbox/{id}/ports/{port}/preview-url`: the URL and its token (new after each restart).
    pub async fn preview(&self, id: &str, port: u16) -> Result<Preview> {
        let url = self.sandbox_url(id, &["ports", &port.to_string(), "preview-url"])?;
        self.call_json(Method::GET, &url, None, &format!("preview URL of sandbox {id} port {port}")).await
    }

    /// The toolbox base of a sandbox: `toolboxProxyUrl` + `/` + id, or the dedicated endpoint when
    /// the record has none.
    pub async fn toolbox_base(&self, record: &SandboxRecord) -> Result<Url> {
        let proxy = match record.toolbox_proxy_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => url.to_owned(),
            None => {
                #[derive(Deserialize)]
                struct ProxyUrl {
                    url: String,
                }
                let url = self.sandbox_url(&record.id, &["toolbox-proxy-url"])?;
                let what = format!("toolbox URL of sandbox {}", record.id);
                self.call_json::<ProxyUrl>(Method::GET, &url, None, &what).await?.url
            }
        };
        check_id(PROVIDER, &record.id)?;
        join(&parse_url(&proxy, "toolboxProxyUrl")?, &[&record.id])
    }

    /// Polls until the sandbox is `started`, with the SDKs' backoff (100 ms, ×1.1 after 5 s, at
    /// most 1 s), failing on `error`/`build_failed` (with `errorReason`) and after `timeout`.
    pub async fn wait_started(&self, id: &str, timeout: Duration) -> Result<SandboxRecord> {
        let started = Instant::now();
        let mut interval = Duration::from_millis(100);
        loop {
            let record = self.get(id).await?;
            match record.state() {
                "started" => return Ok(record),
                state @ ("error" | "build_failed") => {
                    let reason = record.error_reason.as_deref().unwrap_or("no reason given");
                    return Err(SandboxError::Provider {
                        provider: PROVIDER,
                        status: None,
                        message: format!("sandbox {id} ended in state `{state}`: {reason}"),
                    });
                }
                state @ ("destroyed" | "destroying") => {
                    return Err(SandboxError::Provider {
                        provider: PROVIDER,
                        status: None,
                        message: format!("sandbox {id} is `{state}`: it will not start"),
                    });
                }
                state => {
                    if started.elapsed() >= timeout {
                        return Err(SandboxError::Timeout {
                            what: format!("Daytona sandbox {id} to start (last state `{state}`)"),
                            after: timeout,
                        });
                    }
                }
            }
            tokio::time::sleep(interval).await;
            if started.elapsed() > Duration::from_secs(5) {
                interval = interval.mul_f64(1.1).min(Duration::from_secs(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_what_the_user_can_fix() {
        let auth = status_error(StatusCode::UNAUTHORIZED, r#"{"message":"Unauthorized"}"#, "x");
        assert!(auth.to_string().contains("DAYTONA_API_KEY"), "{auth}");
        let quota = status_error(
            StatusCode::FORBIDDEN,
            r#"{"statusCode":403,"message":"Total CPU quota exceeded","code":"FORBIDDEN"}"#,
            "create sandbox",
        );
        assert!(quota.to_string().contains("Total CPU quota exceeded"), "{quota}");
        assert!(matches!(
            status_error(StatusCode::NOT_FOUND, "", "sandbox x"),
            SandboxError::NotFound { .. }
        ));
        assert_eq!(error_message("plain text\n"), "plain text");
    }

    #[test]
    fn ids_and_paths_stay_one_segment() {
        let base = Url::parse("http://127.0.0.1:4000/api").unwrap();
        let url = |segments: &[&str]| join(&base, segments).map(String::from);
        assert_eq!(url(&["sandbox", "abc"]).unwrap(), "http://127.0.0.1:4000/api/sandbox/abc");
        let slash = Url::parse("http://h/api/").unwrap();
        assert_eq!(join(&slash, &["sandbox"]).unwrap().as_str(), "http://h/api/sandbox");
        assert_eq!(
            url(&["sandbox", "../../../../evil/delete-me"]).unwrap(),
            "http://127.0.0.1:4000/api/sandbox/..%2F..%2F..%2F..%2Fevil%2Fdelete-me"
        );
        assert_eq!(url(&["sandbox", "a%2Fb"]).unwrap(), "http://127.0.0.1:4000/api/sandbox/a%252Fb");
        assert_eq!(url(&["files", "a?b#c d"]).unwrap(), "http://127.0.0.1:4000/api/files/a%3Fb%23c%20d");
        for bad in ["..", ".", ""] {
            assert!(url(&["sandbox", bad]).is_err(), "{bad:?}");
        }
        let mailto = Url::parse("mailto:x@y").unwrap();
        assert!(join(&mailto, &["sandbox"]).is_err());
    }

    #[test]
    fn listed_ids_are_checked_before_any_request() {
        let api = Api::new(DaytonaConfig::new("http://127.0.0.1:9/api", "k")).unwrap();
        for id in ["../../../../evil/delete-me", "a%2Fb", "\u{1b}]0;x\u{7}"] {
            let err = api.sandbox_url(id, &[]).unwrap_err();
            assert!(matches!(err, SandboxError::BadId { provider: PROVIDER, .. }), "{err}");
        }
        assert_eq!(api.sandbox_url("ok-1", &["start"]).unwrap().path(), "/api/sandbox/ok-1/start");
    }
}
