//! The control plane (`modal.client.ModalClient`, provider facts §A1–A3): the gRPC channel and its
//! metadata, the unary retry policy, the errors a user can act on, and the calls the adapter makes
//! (the create sequence, the task and its tunnels, router access, listing by tag, terminate).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use super::config::{ModalConfig, PROVIDER, TOKEN_VARIABLES};
use super::proto::client::{self as pb, modal_client_client::ModalClientClient};
use crate::contract::error::{Result, SandboxError};
use crate::contract::untrusted::{bad_id, check_id};

/// Modal's sandbox ids have the shape `sb-` + letters and digits (provider facts §A3 step 3);
/// anything else, listed or typed, is never sent.
pub fn check_sandbox_id(id: &str) -> Result<()> {
    check_id(PROVIDER, id)?;
    match id.strip_prefix("sb-") {
        Some(rest) if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()) => Ok(()),
        _ => Err(bad_id(PROVIDER, id)),
    }
}

/// Largest message either way (the Go SDK's limit, provider facts §A1), set explicitly on both
/// channels: tonic refuses a longer message from its length prefix, before reading it.
pub(crate) const MAX_MESSAGE: usize = 100 << 20;
/// HTTP/2 windows (the Go SDK's): large transfers are not throttled by flow control.
const WINDOW: u32 = 64 << 20;
/// `x-modal-client-type`: `CLIENT_TYPE_LIBMODAL_GO`, whose retry and refresh rules this client follows.
const CLIENT_TYPE: &str = "9";
/// `x-modal-client-version`: Go's "behaves like this Python SDK version".
const CLIENT_VERSION: &str = "1.0.0";
/// Retries of a unary call after a retryable code (§A1), from 100 ms doubling up to 1 s.
const UNARY_RETRIES: u32 = 3;
/// Deadline of an ordinary unary call.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// Long polls: the server holds them up to their `timeout` field; the deadline outlasts it.
const TUNNELS_POLL_SECS: f32 = 50.0;
const IMAGE_JOIN_SECS: f32 = 55.0;
const LONG_POLL_DEADLINE: Duration = Duration::from_secs(65);
/// `SandboxGetTaskId` polling (§A3 step 4).
const TASK_POLL: Duration = Duration::from_millis(500);

/// The app every agentd sandbox belongs to.
pub const APP_NAME: &str = "agentd";

/// The codes the SDKs retry (§A1), on the control plane and the router alike.
pub(crate) fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::DeadlineExceeded | Code::Unavailable | Code::Cancelled | Code::Internal | Code::Unknown
    )
}

/// A UUID v4 in its text form: idempotency keys and exec ids.
pub(crate) fn uuid4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The host of a URL (`scheme://host[:port][/…]`), brackets of an IPv6 literal removed.
pub(crate) fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split_once(']').map(|(host, _)| host);
    }
    Some(authority.split(':').next().unwrap_or_default()).filter(|h| !h.is_empty())
}

/// Whether `url` is plaintext (`http://`) to this machine: a local or development control plane,
/// whose tunnels are plaintext too.
pub(crate) fn is_local_plaintext(url: &str) -> bool {
    url.starts_with("http://")
        && url_host(url).is_some_and(|h| matches!(h, "localhost" | "127.0.0.1" | "::1"))
}

/// How to dial `url`: the URI for tonic and whether to speak TLS. `http://` is plaintext h2c,
/// `https://` TLS, except when `loopback_plaintext` (the router of a control plane on a loopback
/// host, Go's rule in §A1): then plaintext to the same host and port (443 if none).
pub(crate) fn dial_plan(url: &str, loopback_plaintext: bool) -> Result<(String, bool)> {
    if url.starts_with("http://") {
        return Ok((url.to_owned(), false));
    }
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("`{url}` is neither http:// nor https://"),
        });
    };
    if !loopback_plaintext {
        return Ok((url.to_owned(), true));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let has_port = match authority.rsplit_once(']') {
        Some((_, tail)) => tail.starts_with(':'),
        None => authority.contains(':'),
    };
    let port = if has_port { "" } else { ":443" };
    Ok((format!("http://{authority}{port}"), false))
}

/// A lazily connected channel to `url` with the SDKs' transport settings.
pub(crate) fn channel(url: &str, loopback_plaintext: bool) -> Result<Channel> {
    let (uri, tls) = dial_plan(url, loopback_plaintext)?;
    let bad = |e: &dyn std::fmt::Display| SandboxError::Provider {
        provider: PROVIDER,
        status: None,
        message: format!("cannot use `{url}`: {e}"),
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| bad(&e))?
        .connect_timeout(Duration::from_secs(10))
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    if tls {
        endpoint = endpoint.tls_config(ClientTlsConfig::new().with_webpki_roots()).map_err(|e| bad(&e))?;
    }
    Ok(endpoint.connect_lazy())
}

fn ascii(value: &str) -> Result<AsciiMetadataValue> {
    value.parse().map_err(|_| SandboxError::Provider {
        provider: PROVIDER,
        status: None,
        message: "a token or setting holds characters that cannot travel as gRPC metadata".to_owned(),
    })
}

/// The error a user can act on for a failed control-plane call about `what`.
pub(crate) fn status_error(status: &Status, what: &str) -> SandboxError {
    match status.code() {
        Code::Unauthenticated => SandboxError::Auth { provider: PROVIDER, variable: TOKEN_VARIABLES },
        Code::NotFound => SandboxError::NotFound { provider: PROVIDER, what: what.to_owned() },
        code => SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("{what}: {code:?}: {}", status.message()),
        },
    }
}

/// What to do after a failed attempt of a unary call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Next {
    /// Retry after this long (backoff).
    Retry(Duration),
    /// The server asked for this wait (`RPCRetryPolicy`); does not count against the retries.
    Throttle(Duration),
    Fail,
}

/// The control plane's unary policy (§A1): retryable codes up to [`UNARY_RETRIES`] times from
/// 100 ms doubling to 1 s; a server-directed `RPCRetryPolicy` waits `max(retry_after, 100 ms)`
/// without limit while the throttle waits stay within `max_throttle` (`None`: no limit).
pub(crate) fn next_step(
    status: &Status,
    retries: u32,
    throttled: Duration,
    max_throttle: Option<Duration>,
) -> Next {
    if let Some(after) = retry_after(status.details()) {
        let wait = after.max(Duration::from_millis(100));
        if max_throttle.is_none_or(|max| throttled + wait <= max) {
            return Next::Throttle(wait);
        }
        return Next::Fail;
    }
    if retryable(status.code()) && retries < UNARY_RETRIES {
        let delay =
            Duration::from_millis(100).saturating_mul(1 << retries.min(10)).min(Duration::from_secs(1));
        return Next::Retry(delay);
    }
    Next::Fail
}

/// `google.rpc.Status`, the envelope of `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// The `modal.client.RPCRetryPolicy.retry_after_secs` in a status's details, if any.
pub(crate) fn retry_after(details: &[u8]) -> Option<Duration> {
    if details.is_empty() {
        return None;
    }
    let status = RpcStatus::decode(details).ok()?;
    let any = status.details.into_iter().find(|a| a.type_url.ends_with("/modal.client.RPCRetryPolicy"))?;
    let policy = pb::RpcRetryPolicy::decode(any.value.as_slice()).ok()?;
    Duration::try_from_secs_f32(policy.retry_after_secs).ok()
}

/// `MODAL_MAX_THROTTLE_WAIT` seconds (`0`: no server-directed retries); unset: no limit.
fn max_throttle() -> Option<Duration> {
    let secs: f64 = std::env::var("MODAL_MAX_THROTTLE_WAIT").ok()?.trim().parse().ok()?;
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO))
}

/// What a new sandbox is made with (§A3 step 3).
#[derive(Debug, Clone)]
pub struct CreateSpec {
    /// `FROM <image>`.
    pub image: String,
    /// The longest lifetime; never 0.
    pub timeout_secs: u32,
    pub idle_timeout_secs: Option<u32>,
    /// The port agentd listens on, opened as a tunnel.
    pub port: u16,
    pub tags: Vec<(String, String)>,
}

/// The `SandboxCreate` request for `spec` in `app_id` with `image_id`.
pub fn create_request(
    app_id: &str,
    image_id: &str,
    spec: &CreateSpec,
    environment: &str,
) -> pb::SandboxCreateRequest {
    let definition = pb::Sandbox {
        image_id: image_id.to_owned(),
        entrypoint_args: Vec::new(),
        timeout_secs: spec.timeout_secs.max(1),
        idle_timeout_secs: spec.idle_timeout_secs,
        open_ports_oneof: Some(pb::sandbox::OpenPortsOneof::OpenPorts(pb::PortSpecs {
            ports: vec![pb::PortSpec { port: u32::from(spec.port), ..Default::default() }],
        })),
        ..Default::default()
    };
    pb::SandboxCreateRequest {
        app_id: app_id.to_owned(),
        definition: Some(definition),
        environment_name: environment.to_owned(),
        tags: spec
            .tags
            .iter()
            .map(|(k, v)| pb::SandboxTag { tag_name: k.clone(), tag_value: v.clone() })
            .collect(),
    }
}

/// An authenticated client of one control plane.
#[derive(Clone)]
pub struct Control {
    client: ModalClientClient<Channel>,
    config: Arc<ModalConfig>,
    /// The metadata every call carries (tokens, client type and version).
    metadata: MetadataMap,
}

impl Control {
    pub fn new(config: ModalConfig) -> Result<Self> {
        let channel = channel(&config.server_url, false)?;
        let client = ModalClientClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let mut metadata = MetadataMap::new();
        metadata.insert("x-modal-token-id", ascii(&config.token_id)?);
        metadata.insert("x-modal-token-secret", ascii(&config.token_secret)?);
        metadata.insert("x-modal-client-type", AsciiMetadataValue::from_static(CLIENT_TYPE));
        metadata.insert("x-modal-client-version", AsciiMetadataValue::from_static(CLIENT_VERSION));
        Ok(Self { client, config: Arc::new(config), metadata })
    }

    pub fn config(&self) -> &ModalConfig {
        &self.config
    }

    fn environment(&self) -> String {
        self.config.environment.clone().unwrap_or_default()
    }

    fn request<T>(&self, message: T, deadline: Duration) -> Request<T> {
        let mut request = Request::new(message);
        for kv in self.metadata.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(key, value) = kv {
                request.metadata_mut().insert(key.clone(), value.clone());
            }
        }
        request.set_timeout(deadline);
        request
    }

    /// One logical unary call with §A1's retries: the same `x-idempotency-key` on every attempt,
    /// `x-retry-attempt` counting them, `x-retry-delay` once retrying.
    pub(crate) async fn unary<Req, Resp, Fut>(
        &self,
        message: Req,
        deadline: Duration,
        call: impl Fn(ModalClientClient<Channel>, Request<Req>) -> Fut,
    ) -> std::result::Result<Resp, Status>
    where
        Req: Clone,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, Status>>,
    {
        let key = AsciiMetadataValue::try_from(uuid4()).map_err(|e| Status::internal(e.to_string()))?;
        let first = Instant::now();
        let (mut attempt, mut retries, mut throttles) = (0_u32, 0_u32, 0_u32);
        let mut throttled = Duration::ZERO;
        let max_throttle = max_throttle();
        loop {
            let mut request = self.request(message.clone(), deadline);
            let metadata = request.metadata_mut();
            metadata.insert("x-idempotency-key", key.clone());
            metadata.insert("x-retry-attempt", AsciiMetadataValue::from(attempt));
            if attempt > 0 {
                let delay = format!("{:.3}", first.elapsed().as_secs_f64());
                if let Ok(delay) = AsciiMetadataValue::try_from(delay) {
                    metadata.insert("x-retry-delay", delay);
                }
            }
            if throttles > 0 {
                metadata.insert("x-throttle-retry-attempt", AsciiMetadataValue::from(throttles));
            }
            let status = match call(self.client.clone(), request).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => status,
            };
            match next_step(&status, retries, throttled, max_throttle) {
                Next::Retry(delay) => {
                    tracing::debug!(code = ?status.code(), "Modal call failed, retrying in {delay:?}: {}", status.message());
                    retries += 1;
                    tokio::time::sleep(delay).await;
                }
                Next::Throttle(wait) => {
                    throttles += 1;
                    throttled += wait;
                    tokio::time::sleep(wait).await;
                }
                Next::Fail => return Err(status),
            }
            attempt += 1;
        }
    }

    /// `AppGetOrCreate` of [`APP_NAME`] (create if missing).
    pub async fn app(&self) -> Result<String> {
        let request = pb::AppGetOrCreateRequest {
            app_name: APP_NAME.to_owned(),
            environment_name: self.environment(),
            object_creation_type: pb::ObjectCreationType::CreateIfMissing as i32,
        };
        let response = self
            .unary(request, CALL_DEADLINE, |mut c, r| async move { c.app_get_or_create(r).await })
            .await
            .map_err(|s| status_error(&s, &format!("app `{APP_NAME}`")))?;
        Ok(response.app_id)
    }

    /// The image builder version: `MODAL_IMAGE_BUILDER_VERSION`, else the environment's setting
    /// (empty when the server does not say: it picks its default).
    async fn builder_version(&self) -> Result<String> {
        if let Some(version) = &self.config.image_builder_version {
            return Ok(version.clone());
        }
        let request = pb::EnvironmentGetOrCreateRequest { deployment_name: self.environment() };
        match self
            .unary(request, CALL_DEADLINE, |mut c, r| async move { c.environment_get_or_create(r).await })
            .await
        {
            Ok(response) => Ok(response
                .metadata
                .and_then(|m| m.settings)
                .map(|s| s.image_builder_version)
                .unwrap_or_default()),
            Err(status) if status.code() == Code::Unimplemented => Ok(String::new()),
            Err(status) => Err(status_error(&status, "environment settings")),
        }
    }

    /// `ImageGetOrCreate` of `FROM <image>`, joined until built (§A3 step 2).
    pub async fn image(&self, app_id: &str, image: &str, timeout: Duration) -> Result<String> {
        let request = pb::ImageGetOrCreateRequest {
            image: Some(pb::Image {
                dockerfile_commands: vec![format!("FROM {image}")],
                ..Default::default()
            }),
            app_id: app_id.to_owned(),
            builder_version: self.builder_version().await?,
            ..Default::default()
        };
        let what = format!("image `{image}`");
        let response = self
            .unary(request, LONG_POLL_DEADLINE, |mut c, r| async move { c.image_get_or_create(r).await })
            .await
            .map_err(|s| status_error(&s, &what))?;
        let result = match response.result.filter(|r| r.status != 0) {
            Some(result) => result,
            None => self.join_image(&response.image_id, image, timeout).await?,
        };
        image_outcome(image, &result)?;
        Ok(response.image_id)
    }

    /// `ImageJoinStreaming` until a message carries a result, reopened at the last entry when the
    /// stream ends or breaks.
    async fn join_image(&self, image_id: &str, image: &str, timeout: Duration) -> Result<pb::GenericResult> {
        let started = Instant::now();
        let mut last_entry_id = String::new();
        let mut failures = 0;
        loop {
            if started.elapsed() >= timeout {
                return Err(SandboxError::Timeout {
                    what: format!("Modal to build image `{image}`"),
                    after: timeout,
                });
            }
            let request = pb::ImageJoinStreamingRequest {
                image_id: image_id.to_owned(),
                timeout: IMAGE_JOIN_SECS,
                last_entry_id: last_entry_id.clone(),
            };
            let mut client = self.client.clone();
            let opened = client.image_join_streaming(self.request(request, LONG_POLL_DEADLINE)).await;
            let broke = match opened {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(message)) => {
                                failures = 0;
                                if !message.entry_id.is_empty() {
                                    last_entry_id = message.entry_id;
                                }
                                if let Some(result) = message.result.filter(|r| r.status != 0) {
                                    return Ok(result);
                                }
                            }
                            Ok(None) => break None,
                            Err(status) => break Some(status),
                        }
                    }
                }
                Err(status) => Some(status),
            };
            if let Some(status) = broke {
                failures += 1;
                if !retryable(status.code()) || failures > 10 {
                    return Err(status_error(&status, &format!("build of image `{image}`")));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// The create sequence up to the sandbox id (§A3 steps 1–3).
    pub async fn create(&self, spec: &CreateSpec, build_timeout: Duration) -> Result<String> {
        let app_id = self.app().await?;
        let image_id = self.image(&app_id, &spec.image, build_timeout).await?;
        let request = create_request(&app_id, &image_id, spec, &self.environment());
        let response = self
            .unary(request, CALL_DEADLINE, |mut c, r| async move { c.sandbox_create(r).await })
            .await
            .map_err(|s| status_error(&s, &format!("sandbox from `{}`", spec.image)))?;
        check_sandbox_id(&response.sandbox_id)?;
        Ok(response.sandbox_id)
    }

    /// The sandbox's task, polled every 500 ms until it runs (§A3 step 4).
    pub async fn task_id(&self, sandbox_id: &str, timeout: Duration) -> Result<String> {
        check_sandbox_id(sandbox_id)?;
        let started = Instant::now();
        loop {
            let request =
                pb::SandboxGetTaskIdRequest { sandbox_id: sandbox_id.to_owned(), ..Default::default() };
            let response = self
                .unary(request, CALL_DEADLINE, |mut c, r| async move { c.sandbox_get_task_id(r).await })
                .await
                .map_err(|s| status_error(&s, &format!("sandbox {sandbox_id}")))?;
            if let Some(result) = response.task_result.filter(|r| r.status != 0) {
                return Err(SandboxError::Provider {
                    provider: PROVIDER,
                    status: None,
                    message: format!("sandbox {sandbox_id} has already ended ({})", describe(&result)),
                });
            }
            if let Some(task_id) = response.task_id.filter(|t| !t.is_empty()) {
                return Ok(task_id);
            }
            if started.elapsed() >= timeout {
                return Err(SandboxError::Timeout {
                    what: format!("Modal sandbox {sandbox_id} to start"),
                    after: timeout,
                });
            }
            tokio::time::sleep(TASK_POLL).await;
        }
    }

    /// The sandbox's tunnels, once ready (§A3 step 5: status 4 means "not yet").
    pub async fn tunnels(&self, sandbox_id: &str, timeout: Duration) -> Result<Vec<pb::TunnelData>> {
        check_sandbox_id(sandbox_id)?;
        let started = Instant::now();
        loop {
            let request = pb::SandboxGetTunnelsRequest {
                sandbox_id: sandbox_id.to_owned(),
                timeout: TUNNELS_POLL_SECS,
            };
            let response = self
                .unary(request, LONG_POLL_DEADLINE, |mut c, r| async move { c.sandbox_get_tunnels(r).await })
                .await
                .map_err(|s| status_error(&s, &format!("tunnels of sandbox {sandbox_id}")))?;
            let status = response.result.as_ref().map_or(0, |r| r.status);
            if status != pb::generic_result::GenericStatus::Timeout as i32 {
                return Ok(response.tunnels);
            }
            if started.elapsed() >= timeout {
                return Err(SandboxError::Timeout {
                    what: format!("tunnels of Modal sandbox {sandbox_id}"),
                    after: timeout,
                });
            }
        }
    }

    /// `TaskGetCommandRouterAccess`: the router's JWT and URL. The raw status is kept: the router
    /// client tells `FAILED_PRECONDITION` (no router for this task) apart.
    pub(crate) async fn router_access(&self, task_id: &str) -> std::result::Result<(String, String), Status> {
        let request = pb::TaskGetCommandRouterAccessRequest { task_id: task_id.to_owned() };
        let response =
            self.unary(request, CALL_DEADLINE, |mut c, r| async move {
                c.task_get_command_router_access(r).await
            })
            .await?;
        Ok((response.jwt, response.url))
    }

    /// The running sandboxes carrying every tag of `tags`. Their ids are Modal's word: every call
    /// here that takes one checks it ([`check_sandbox_id`]).
    pub async fn list(&self, tags: &[(&str, &str)]) -> Result<Vec<pb::SandboxInfo>> {
        let request = pb::SandboxListRequest {
            environment_name: self.environment(),
            tags: tags
                .iter()
                .map(|(k, v)| pb::SandboxTag { tag_name: (*k).to_owned(), tag_value: (*v).to_owned() })
                .collect(),
            ..Default::default()
        };
        let response = self
            .unary(request, CALL_DEADLINE, |mut c, r| async move { c.sandbox_list(r).await })
            .await
            .map_err(|s| status_error(&s, "sandbox list"))?;
        Ok(response.sandboxes)
    }

    /// `SandboxTerminate`.
    pub async fn terminate(&self, sandbox_id: &str) -> Result<()> {
        check_sandbox_id(sandbox_id)?;
        let request = pb::SandboxTerminateRequest { sandbox_id: sandbox_id.to_owned() };
        self.unary(request, CALL_DEADLINE, |mut c, r| async move { c.sandbox_terminate(r).await })
            .await
            .map(drop)
            .map_err(|s| status_error(&s, &format!("sandbox {sandbox_id}")))
    }
}

/// A finished build's result: only `SUCCESS` is usable.
fn image_outcome(image: &str, result: &pb::GenericResult) -> Result<()> {
    if result.status == pb::generic_result::GenericStatus::Success as i32 {
        return Ok(());
    }
    Err(SandboxError::Provider {
        provider: PROVIDER,
        status: None,
        message: format!("image `{image}` could not be built ({})", describe(result)),
    })
}

/// A `GenericResult` in words: its status name and exception.
pub(crate) fn describe(result: &pb::GenericResult) -> String {
    let status = pb::generic_result::GenericStatus::try_from(result.status)
        .map_or_else(|_| format!("status {}", result.status), |s| s.as_str_name().to_lowercase());
    if result.exception.is_empty() { status } else { format!("{status}: {}", result.exception.trim()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_ids_have_modal_s_shape() {
        for id in ["sb-a1B2", "sb-0123456789abcdefGHIJ"] {
            assert!(check_sandbox_id(id).is_ok(), "{id}");
        }
        for id in
            ["sb-", "sb", "ab-123", "sb-a_b", "sb-a.b", "sb-../x", "../../../../evil/delete-me", "sb-%2F", ""]
        {
            let err = check_sandbox_id(id).unwrap_err();
            assert!(matches!(err, SandboxError::BadId { provider: PROVIDER, .. }), "{id}: {err}");
        }
    }

    #[test]
    fn urls_dial_as_the_sdks_do() {
        assert_eq!(dial_plan("http://127.0.0.1:5", false).unwrap(), ("http://127.0.0.1:5".to_owned(), false));
        assert_eq!(
            dial_plan("https://api.modal.com:443", false).unwrap(),
            ("https://api.modal.com:443".to_owned(), true)
        );
        // Go's loopback rule for the router: plaintext despite https, port 443 by default.
        assert_eq!(dial_plan("https://127.0.0.1:7", true).unwrap(), ("http://127.0.0.1:7".to_owned(), false));
        assert_eq!(dial_plan("https://localhost", true).unwrap(), ("http://localhost:443".to_owned(), false));
        assert_eq!(dial_plan("https://[::1]:9/x", true).unwrap(), ("http://[::1]:9".to_owned(), false));
        assert!(dial_plan("ftp://x", false).is_err());
    }

    #[test]
    fn hosts_and_loopback() {
        assert_eq!(url_host("https://api.modal.com:443/x"), Some("api.modal.com"));
        assert_eq!(url_host("http://[::1]:80"), Some("::1"));
        assert_eq!(url_host("http://u@h"), Some("h"));
        assert!(is_local_plaintext("http://127.0.0.1:5") && is_local_plaintext("http://localhost"));
        assert!(is_local_plaintext("http://[::1]:5"));
        assert!(!is_local_plaintext("https://127.0.0.1:5") && !is_local_plaintext("http://10.0.0.1:5"));
    }

    #[test]
    fn retries_follow_the_go_policy() {
        let unavailable = Status::unavailable("x");
        let steps: Vec<Next> = (0..4).map(|n| next_step(&unavailable, n, Duration::ZERO, None)).collect();
        let ms = Duration::from_millis;
        assert_eq!(steps, [Next::Retry(ms(100)), Next::Retry(ms(200)), Next::Retry(ms(400)), Next::Fail]);
        for code in [Code::DeadlineExceeded, Code::Cancelled, Code::Internal, Code::Unknown] {
            assert_eq!(
                next_step(&Status::new(code, ""), 0, Duration::ZERO, None),
                Next::Retry(ms(100)),
                "{code:?}"
            );
        }
        for code in [Code::Unauthenticated, Code::NotFound, Code::InvalidArgument, Code::FailedPrecondition] {
            assert_eq!(next_step(&Status::new(code, ""), 0, Duration::ZERO, None), Next::Fail, "{code:?}");
        }
    }

    #[test]
    fn server_directed_retries_wait_as_told() {
        let policy = pb::RpcRetryPolicy { retry_after_secs: 0.02 }.encode_to_vec();
        let details = RpcStatus {
            details: vec![Any {
                type_url: "type.googleapis.com/modal.client.RPCRetryPolicy".to_owned(),
                value: policy,
            }],
        }
        .encode_to_vec();
        let status = Status::with_details(Code::ResourceExhausted, "slow down", details.into());
        // At least 100 ms, not counted against the retries, capped by MODAL_MAX_THROTTLE_WAIT.
        let ms = Duration::from_millis;
        assert_eq!(next_step(&status, 99, Duration::ZERO, None), Next::Throttle(ms(100)));
        assert_eq!(next_step(&status, 0, ms(950), Some(ms(1000))), Next::Fail);
        assert_eq!(next_step(&status, 0, Duration::ZERO, Some(Duration::ZERO)), Next::Fail);
        assert_eq!(retry_after(b"not a status"), None);
    }

    #[test]
    fn errors_name_what_the_user_can_fix() {
        let auth = status_error(&Status::unauthenticated("bad token"), "app");
        assert!(
            auth.to_string().contains("MODAL_TOKEN_ID") && auth.to_string().contains("MODAL_TOKEN_SECRET"),
            "{auth}"
        );
        assert!(matches!(
            status_error(&Status::not_found("x"), "sandbox sb-1"),
            SandboxError::NotFound { .. }
        ));
        let other = status_error(&Status::resource_exhausted("quota"), "sandbox").to_string();
        assert!(other.contains("quota") && other.contains("ResourceExhausted"), "{other}");
    }

    #[test]
    fn the_create_request_opens_the_port_and_never_sends_a_zero_lifetime() {
        let spec = CreateSpec {
            image: "img".to_owned(),
            timeout_secs: 0,
            idle_timeout_secs: Some(60),
            port: 7700,
            tags: vec![("dev.agentd.sandbox".to_owned(), "1".to_owned())],
        };
        let request = create_request("ap-1", "im-1", &spec, "");
        let definition = request.definition.unwrap();
        assert_eq!((definition.timeout_secs, definition.idle_timeout_secs), (1, Some(60)));
        assert!(definition.entrypoint_args.is_empty());
        let Some(pb::sandbox::OpenPortsOneof::OpenPorts(ports)) = definition.open_ports_oneof else {
            panic!()
        };
        assert_eq!(ports.ports[0].port, 7700);
        assert_eq!(request.tags[0].tag_name, "dev.agentd.sandbox");
    }

    #[test]
    fn uuids_are_version_4() {
        let id = uuid4();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, uuid4());
    }

    #[test]
    fn only_success_builds_are_usable() {
        let failed = pb::GenericResult { status: 2, exception: "no such image: x".to_owned(), exitcode: 0 };
        let err = image_outcome("x", &failed).unwrap_err().to_string();
        assert!(err.contains("no such image: x") && err.contains("failure"), "{err}");
        assert!(image_outcome("x", &pb::GenericResult { status: 1, ..Default::default() }).is_ok());
    }
}
