//! The fake Modal (`agentd_fakes::fake_modal`) checked against the official Python client, its wire
//! facts (auth, image build, sandbox states, stdio resume at an offset, stdin offsets, the exec
//! timeout, JWT expiry, injected faults) checked with the adapter's own generated gRPC clients, and
//! the standalone `fake-modal` binary.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_fakes::fake_modal::{CONTAINER_LABEL, FakeModal};
use agentd_host::adapters::modal::proto::client::modal_client_client::ModalClientClient;
use agentd_host::adapters::modal::proto::client::{self as api, generic_result::GenericStatus};
use agentd_host::adapters::modal::proto::task_command_router::task_command_router_client::TaskCommandRouterClient;
use agentd_host::adapters::modal::proto::task_command_router::{
    self as tcr, task_exec_poll_response, task_exec_stdin_write_stream_request::Payload,
    task_exec_wait_response::ExitStatus,
};
use agentd_tests::{Need, docker_available, skip};
use base64::Engine as _;
use tonic::transport::Channel;
use tonic::{Code, Request};

const BUSYBOX: &str = "agentd-base-busybox:latest";
const DEBIAN: &str = "agentd-base-debian:latest";

/// The control plane, with the fake's token pair on every call.
struct Control {
    client: ModalClientClient<Channel>,
    tokens: Tokens,
}

/// The token pair (apart from the client, so a closure can make requests while the client is
/// borrowed).
struct Tokens {
    id: String,
    secret: String,
}

impl Tokens {
    fn req<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert("x-modal-token-id", self.id.parse().unwrap());
        metadata.insert("x-modal-token-secret", self.secret.parse().unwrap());
        metadata.insert("x-modal-client-type", "9".parse().unwrap());
        metadata.insert("x-modal-client-version", "1.0.0".parse().unwrap());
        request
    }
}

impl Control {
    async fn new(fake: &FakeModal) -> Self {
        let client = ModalClientClient::connect(fake.server_url()).await.unwrap();
        let tokens = Tokens { id: fake.token_id().to_owned(), secret: fake.token_secret().to_owned() };
        Self { client, tokens }
    }

    fn req<T>(&self, message: T) -> Request<T> {
        self.tokens.req(message)
    }
}

/// The router, with a bearer JWT on every call.
struct Router {
    client: TaskCommandRouterClient<Channel>,
    jwt: String,
    task_id: String,
}

impl Router {
    fn req<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.metadata_mut().insert("authorization", format!("Bearer {}", self.jwt).parse().unwrap());
        request
    }

    async fn start(&mut self, exec_id: &str, args: &[&str], timeout_secs: Option<u32>) {
        let start = tcr::TaskExecStartRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.to_owned(),
            command_args: args.iter().map(|a| (*a).to_owned()).collect(),
            stdout_config: tcr::TaskExecStdoutConfig::Pipe as i32,
            stderr_config: tcr::TaskExecStderrConfig::Pipe as i32,
            timeout_secs,
            ..Default::default()
        };
        self.client.task_exec_start(self.req(start)).await.unwrap();
    }

    /// Reads one descriptor from `offset` until the stream ends: (bytes, the error that ended it).
    async fn read(
        &mut self,
        exec_id: &str,
        fd: tcr::TaskExecStdioFileDescriptor,
        offset: u64,
    ) -> (Vec<u8>, Option<Code>) {
        let read = tcr::TaskExecStdioReadRequest {
            task_id: self.task_id.clone(),
            exec_id: exec_id.to_owned(),
            offset,
            file_descriptor: fd as i32,
        };
        let mut stream = self.client.task_exec_stdio_read(self.req(read)).await.unwrap().into_inner();
        let mut bytes = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(message)) => bytes.extend_from_slice(&message.data),
                Ok(None) => return (bytes, None),
                Err(status) => return (bytes, Some(status.code())),
            }
        }
    }

    async fn wait(&mut self, exec_id: &str) -> ExitStatus {
        let wait = tcr::TaskExecWaitRequest { task_id: self.task_id.clone(), exec_id: exec_id.to_owned() };
        self.client.task_exec_wait(self.req(wait)).await.unwrap().into_inner().exit_status.unwrap()
    }

    async fn stdin(&mut self, exec_id: &str, offset: u64, data: &[u8], end: bool) -> Result<(), Code> {
        let mut messages = vec![tcr::TaskExecStdinWriteStreamRequest {
            payload: Some(Payload::Start(tcr::TaskExecStdinWriteStreamStart {
                task_id: self.task_id.clone(),
                exec_id: exec_id.to_owned(),
                offset,
            })),
        }];
        if !data.is_empty() {
            messages
                .push(tcr::TaskExecStdinWriteStreamRequest { payload: Some(Payload::Data(data.to_vec())) });
        }
        if end {
            messages.push(tcr::TaskExecStdinWriteStreamRequest {
                payload: Some(Payload::End(tcr::TaskExecStdinWriteStreamEnd {})),
            });
        }
        let request = self.req(futures_util::stream::iter(messages));
        self.client.task_exec_stdin_write_stream(request).await.map(|_| ()).map_err(|s| s.code())
    }
}

fn sandbox_definition(image_id: &str, timeout_secs: u32, port: u32) -> api::Sandbox {
    api::Sandbox {
        image_id: image_id.to_owned(),
        timeout_secs,
        open_ports_oneof: Some(api::sandbox::OpenPortsOneof::OpenPorts(api::PortSpecs {
            ports: vec![api::PortSpec { port, ..Default::default() }],
        })),
        ..Default::default()
    }
}

fn tag(name: &str, value: &str) -> api::SandboxTag {
    api::SandboxTag { tag_name: name.to_owned(), tag_value: value.to_owned() }
}

/// What the script prints, in both modes.
const CLIENT_CHECKS: [&str; 11] = [
    "check sandbox-id True",
    "check listed True",
    "check tunnel-host 127.0.0.1",
    "check stdout 'hi\\n'",
    "check stderr 'err\\n'",
    "check exit-code 3",
    "check stdin-echo b'ping\\x00\\xff'",
    "check stdin-exit-code 0",
    "check poll-running None",
    // The client's rule for a TERMINATED result.
    "check returncode 137",
    "done",
];

/// Runs tests/modal_sdk_check.py against `fake` with `MODAL_SANDBOX_V2` = `v2`; the distinct RPCs
/// it called (every call answered OK).
async fn run_client_script(fake: &FakeModal, python: &std::ffi::OsStr, v2: &str) -> Vec<String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("modal_sdk_check.py");
    // An empty home and working directory: no `~/.modal.toml` or profile for the client to pick up.
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(python);
    command.arg(&script).arg(DEBIAN).current_dir(home.path()).kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MODAL_") {
            command.env_remove(key);
        }
    }
    command.env("HOME", home.path()).env("MODAL_SANDBOX_V2", v2).envs(fake.env());
    let before = fake.calls().len();
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the client script finishes")
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("client script (MODAL_SANDBOX_V2={v2}) stderr:\n{}", String::from_utf8_lossy(&output.stderr));
    let calls = fake.calls().split_off(before);
    let listed: Vec<String> = calls.iter().map(|c| format!("{} {:?}", c.rpc, c.code)).collect();
    eprintln!("calls the client made:\n  {}", listed.join("\n  "));
    assert!(output.status.success(), "the client script failed:\n{stdout}");
    assert_eq!(stdout.lines().collect::<Vec<_>>(), CLIENT_CHECKS);
    assert!(calls.iter().all(|c| c.code == Code::Ok), "{listed:?}");
    let mut rpcs: Vec<String> = calls.into_iter().map(|c| c.rpc).collect();
    rpcs.sort_unstable();
    rpcs.dedup();
    rpcs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_creates_a_sandbox_and_runs_an_exec() {
    if !docker_available(DEBIAN).await {
        return;
    }
    let Some(python) = std::env::var_os("AGENTD_MODAL_PYTHON") else {
        skip(Need::ModalSdk, "AGENTD_MODAL_PYTHON is not set (.ci/run installs the client in a venv)");
        return;
    };
    let fake = FakeModal::start();
    // The V1 sandbox RPCs (the adapter's) with `MODAL_SANDBOX_V2=0`.
    let v1 = run_client_script(&fake, &python, "0").await;
    assert_eq!(
        v1,
        [
            "AppGetOrCreate",
            "EnvironmentGetOrCreate",
            "ImageGetOrCreate",
            "ImageJoinStreaming",
            "SandboxCreate",
            "SandboxGetTaskId",
            "SandboxGetTunnels",
            "SandboxList",
            "SandboxTerminate",
            "SandboxWait",
            "TaskExecStart",
            "TaskExecStdinWrite",
            "TaskExecStdioRead",
            "TaskExecWait",
            "TaskGetCommandRouterAccess",
        ]
    );
    // The client's default: the `*V2` sandbox RPCs, behind an `AuthTokenGet` token; the create
    // answers with the tunnels and router access (the image is built by now: no join).
    let v2 = run_client_script(&fake, &python, "1").await;
    assert_eq!(
        v2,
        [
            "AppGetOrCreate",
            "AuthTokenGet",
            "EnvironmentGetOrCreate",
            "ImageGetOrCreate",
            "SandboxCreateV2",
            "SandboxListV2",
            "SandboxTerminateV2",
            "SandboxWaitV2",
            "TaskExecStart",
            "TaskExecStdinWrite",
            "TaskExecStdioRead",
            "TaskExecWait",
        ]
    );
    let filter = format!("label={CONTAINER_LABEL}={}", fake.instance());
    assert!(agentd_fakes::containers::listed(&filter).is_empty(), "the client's terminate left containers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_follows_the_wire_facts() {
    if !docker_available(BUSYBOX).await {
        return;
    }
    let fake = FakeModal::start();
    let mut control = Control::new(&fake).await;

    // Auth: no token, or a wrong secret: UNAUTHENTICATED.
    let app = api::AppGetOrCreateRequest {
        app_name: "agentd".to_owned(),
        environment_name: String::new(),
        object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
    };
    let bare = control.client.app_get_or_create(Request::new(app.clone())).await.unwrap_err();
    assert_eq!(bare.code(), Code::Unauthenticated);
    let mut wrong = control.req(app.clone());
    wrong.metadata_mut().insert("x-modal-token-secret", "as-wrong".parse().unwrap());
    assert_eq!(control.client.app_get_or_create(wrong).await.unwrap_err().code(), Code::Unauthenticated);

    // Apps: lookup-only of an unknown app is NOT_FOUND; create-if-missing is stable.
    let lookup = api::AppGetOrCreateRequest { object_creation_type: 0, ..app.clone() };
    let missing = control.client.app_get_or_create(control.req(lookup.clone())).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let app_id =
        control.client.app_get_or_create(control.req(app.clone())).await.unwrap().into_inner().app_id;
    assert!(app_id.starts_with("ap-"), "{app_id}");
    let again = control.client.app_get_or_create(control.req(lookup)).await.unwrap().into_inner().app_id;
    assert_eq!(again, app_id);

    // Images: the first GetOrCreate has no result yet; the join stream gives a log entry, then
    // SUCCESS; afterwards GetOrCreate has it. An unknown image ends in FAILURE naming it.
    let image = |from: &str| api::ImageGetOrCreateRequest {
        image: Some(api::Image { dockerfile_commands: vec![format!("FROM {from}")], ..Default::default() }),
        app_id: app_id.clone(),
        ..Default::default()
    };
    let made = control.client.image_get_or_create(control.req(image(BUSYBOX))).await.unwrap().into_inner();
    assert!(made.image_id.starts_with("im-") && made.result.is_none(), "{made:?}");
    let join = |image_id: &str, last: &str| api::ImageJoinStreamingRequest {
        image_id: image_id.to_owned(),
        timeout: 55.0,
        last_entry_id: last.to_owned(),
    };
    let mut stream = control
        .client
        .image_join_streaming(control.req(join(&made.image_id, "")))
        .await
        .unwrap()
        .into_inner();
    let mut entries = Vec::new();
    while let Some(message) = stream.message().await.unwrap() {
        entries.push((message.entry_id, message.result.map(|r| r.status), message.task_logs.len()));
    }
    assert_eq!(
        entries,
        [("1".to_owned(), None, 1), ("2".to_owned(), Some(GenericStatus::Success as i32), 0)]
    );
    let mut resumed = control
        .client
        .image_join_streaming(control.req(join(&made.image_id, "1")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resumed.message().await.unwrap().unwrap().entry_id, "2");
    let built = control.client.image_get_or_create(control.req(image(BUSYBOX))).await.unwrap().into_inner();
    assert_eq!((built.image_id.as_str(), built.result.map(|r| r.status)), (made.image_id.as_str(), Some(1)));
    let bad = control
        .client
        .image_get_or_create(control.req(image("fake:no-such-image")))
        .await
        .unwrap()
        .into_inner();
    let mut stream =
        control.client.image_join_streaming(control.req(join(&bad.image_id, ""))).await.unwrap().into_inner();
    let mut last = None;
    while let Some(message) = stream.message().await.unwrap() {
        last = message.result.or(last);
    }
    let last = last.unwrap();
    assert_eq!(last.status, GenericStatus::Failure as i32);
    assert!(last.exception.contains("fake:no-such-image"), "{last:?}");

    // The `*V2` RPCs also want an `x-modal-auth-token` from AuthTokenGet.
    let list = |tags: Vec<api::SandboxTag>| api::SandboxListRequest { tags, ..Default::default() };
    let bare = control.client.sandbox_list_v2(control.req(list(vec![]))).await.unwrap_err();
    assert_eq!(bare.code(), Code::Unauthenticated);
    let token = control
        .client
        .auth_token_get(control.req(api::AuthTokenGetRequest {}))
        .await
        .unwrap()
        .into_inner()
        .token;
    let mut with_token = control.req(list(vec![]));
    with_token.metadata_mut().insert("x-modal-auth-token", token.parse().unwrap());
    assert!(control.client.sandbox_list_v2(with_token).await.unwrap().into_inner().sandboxes.is_empty());

    // SandboxCreate: timeout_secs 0 is refused; an injected UNAVAILABLE fails the first try, and
    // the record keeps the idempotency key and attempt of each try.
    let create = |timeout_secs: u32| api::SandboxCreateRequest {
        app_id: app_id.clone(),
        definition: Some(sandbox_definition(&made.image_id, timeout_secs, 8080)),
        tags: vec![tag("dev.agentd.sandbox", "1"), tag("dev.agentd.source", BUSYBOX)],
        ..Default::default()
    };
    let zero = control.client.sandbox_create(control.req(create(0))).await.unwrap_err();
    assert_eq!(zero.code(), Code::InvalidArgument);
    fake.unavailable_once("SandboxCreate");
    let attempt = |n: u32| {
        let mut request = control.tokens.req(create(600));
        request.metadata_mut().insert("x-idempotency-key", "key-1".parse().unwrap());
        request.metadata_mut().insert("x-retry-attempt", n.to_string().parse().unwrap());
        request
    };
    let first = control.client.sandbox_create(attempt(0)).await.unwrap_err();
    assert_eq!(first.code(), Code::Unavailable);
    let sandbox_id = control.client.sandbox_create(attempt(1)).await.unwrap().into_inner().sandbox_id;
    let creates: Vec<_> = fake
        .calls()
        .into_iter()
        .filter(|c| c.rpc == "SandboxCreate" && c.idempotency_key.is_some())
        .map(|c| (c.idempotency_key.unwrap(), c.attempt, c.code))
        .collect();
    assert_eq!(
        creates,
        [("key-1".to_owned(), Some(0), Code::Unavailable), ("key-1".to_owned(), Some(1), Code::Ok)]
    );
    let container = fake.container_of(&sandbox_id).expect("a container");
    assert_eq!(
        agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}.sandbox={sandbox_id}")).len(),
        1
    );

    // States: the first task-id poll finds it scheduling, then it runs (no result while it does).
    let task_poll = || api::SandboxGetTaskIdRequest { sandbox_id: sandbox_id.clone(), ..Default::default() };
    let first = control.client.sandbox_get_task_id(control.req(task_poll())).await.unwrap().into_inner();
    assert_eq!(first, api::SandboxGetTaskIdResponse::default());
    let ready = control.client.sandbox_get_task_id(control.req(task_poll())).await.unwrap().into_inner();
    let task_id = ready.task_id.unwrap();
    assert!(task_id.starts_with("ta-") && ready.task_result.is_none());
    let wait = |timeout: f32| api::SandboxWaitRequest { sandbox_id: sandbox_id.clone(), timeout };
    assert_eq!(control.client.sandbox_wait(control.req(wait(0.0))).await.unwrap().into_inner().result, None);

    // Listing by tags: every tag given must match.
    let listed = control.client.sandbox_list(control.req(list(vec![tag("dev.agentd.sandbox", "1")]))).await;
    let ids: Vec<String> = listed.unwrap().into_inner().sandboxes.into_iter().map(|s| s.id).collect();
    assert_eq!(ids, std::slice::from_ref(&sandbox_id));
    let other = list(vec![tag("dev.agentd.sandbox", "1"), tag("dev.agentd.source", "other")]);
    assert!(control.client.sandbox_list(control.req(other)).await.unwrap().into_inner().sandboxes.is_empty());

    // Router access: a three-part JWT with `exp` in its JSON payload, and the router's URL.
    let access = api::TaskGetCommandRouterAccessRequest { task_id: task_id.clone() };
    let access =
        control.client.task_get_command_router_access(control.req(access)).await.unwrap().into_inner();
    assert_eq!(access.url, fake.router_url());
    let parts: Vec<&str> = access.jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "{}", access.jwt);
    let payload: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(parts[1]).unwrap())
            .unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(payload["exp"].as_u64().unwrap() > now + 60, "{payload}");
    let client = TaskCommandRouterClient::connect(access.url.clone()).await.unwrap();
    let mut router = Router { client, jwt: access.jwt, task_id: task_id.clone() };
    let poll =
        |exec_id: &str| tcr::TaskExecPollRequest { task_id: task_id.clone(), exec_id: exec_id.to_owned() };
    let unauthenticated = router.client.task_exec_poll(Request::new(poll("x"))).await.unwrap_err();
    assert_eq!(unauthenticated.code(), Code::Unauthenticated);

    // Exec: stdout and stderr apart and whole; a read from an offset gives the rest; the exit code.
    let script = "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done; echo err >&2; exit 3";
    router.start("e1", &["sh", "-c", script], None).await;
    let expected: String = (0..3000).map(|i| format!("line{i}\n")).collect();
    let (out, end) = router.read("e1", tcr::TaskExecStdioFileDescriptor::Stdout, 0).await;
    assert_eq!((String::from_utf8(out).unwrap(), end), (expected.clone(), None));
    let (err, _) = router.read("e1", tcr::TaskExecStdioFileDescriptor::Stderr, 0).await;
    assert_eq!(err, b"err\n");
    let (rest, _) = router.read("e1", tcr::TaskExecStdioFileDescriptor::Stdout, 1000).await;
    assert_eq!(rest, expected.as_bytes()[1000..]);
    assert_eq!(router.wait("e1").await, ExitStatus::Code(3));
    // A duplicate start is a no-op (the output is not doubled).
    router.start("e1", &["sh", "-c", "echo again"], None).await;
    assert_eq!(router.read("e1", tcr::TaskExecStdioFileDescriptor::Stdout, 0).await.0.len(), expected.len());

    // Output streams while the process runs: the first line arrives before it exits.
    router.start("e2", &["sh", "-c", "echo first; sleep 3; echo second"], None).await;
    let read = tcr::TaskExecStdioReadRequest {
        task_id: task_id.clone(),
        exec_id: "e2".to_owned(),
        offset: 0,
        file_descriptor: tcr::TaskExecStdioFileDescriptor::Stdout as i32,
    };
    let mut stream = router.client.task_exec_stdio_read(router.req(read)).await.unwrap().into_inner();
    assert_eq!(stream.message().await.unwrap().unwrap().data, b"first\n");
    let running = router.client.task_exec_poll(router.req(poll("e2"))).await.unwrap().into_inner();
    assert_eq!(running.exit_status, None, "the exec ended before its first line was read");
    assert_eq!(stream.message().await.unwrap().unwrap().data, b"second\n");
    assert!(stream.message().await.unwrap().is_none());
    let done = router.client.task_exec_poll(router.req(poll("e2"))).await.unwrap().into_inner();
    assert_eq!(done.exit_status, Some(task_exec_poll_response::ExitStatus::Code(0)));

    // A stdio stream cut mid-way: exactly N bytes, then UNAVAILABLE; resuming at N loses nothing.
    router.start("e3", &["sh", "-c", script], None).await;
    fake.cut_stdio_after(10_000);
    let (head, end) = router.read("e3", tcr::TaskExecStdioFileDescriptor::Stdout, 0).await;
    assert_eq!((head.len(), end), (10_000, Some(Code::Unavailable)));
    let (tail, end) = router.read("e3", tcr::TaskExecStdioFileDescriptor::Stdout, 10_000).await;
    assert_eq!(end, None, "the cut happens once");
    assert_eq!([head, tail].concat(), expected.as_bytes());

    // Stdin: bytes at the offset accepted so far; any other offset is FAILED_PRECONDITION; `end`
    // closes it.
    router.start("e4", &["cat"], None).await;
    router.stdin("e4", 0, b"hello ", false).await.unwrap();
    let status = tcr::TaskExecStdinStatusRequest { task_id: task_id.clone(), exec_id: "e4".to_owned() };
    let so_far = router.client.task_exec_stdin_status(router.req(status.clone())).await.unwrap().into_inner();
    assert_eq!((so_far.num_bytes_written, so_far.closed), (6, false));
    assert_eq!(router.stdin("e4", 2, b"llo ", false).await, Err(Code::FailedPrecondition));
    assert_eq!(router.stdin("e4", 0, b"", false).await, Err(Code::FailedPrecondition));
    router.stdin("e4", 6, b"world", true).await.unwrap();
    assert_eq!(router.read("e4", tcr::TaskExecStdioFileDescriptor::Stdout, 0).await.0, b"hello world");
    assert_eq!(router.wait("e4").await, ExitStatus::Code(0));
    let closed = router.client.task_exec_stdin_status(router.req(status)).await.unwrap().into_inner();
    assert_eq!((closed.num_bytes_written, closed.closed), (11, true));
    // The first message must be `start`.
    let no_start = router.req(futures_util::stream::iter(vec![tcr::TaskExecStdinWriteStreamRequest {
        payload: Some(Payload::Data(b"x".to_vec())),
    }]));
    let refused = router.client.task_exec_stdin_write_stream(no_start).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);

    // Past timeout_secs the exec and its children are killed: signal 9.
    router.start("e5", &["sh", "-c", "sleep 300 & sleep 301"], Some(1)).await;
    assert_eq!(router.wait("e5").await, ExitStatus::Signal(9));
    router.start("e6", &["sh", "-c", "ps -o args | grep -c '^sleep 30[01]' || true"], None).await;
    assert_eq!(router.read("e6", tcr::TaskExecStdioFileDescriptor::Stdout, 0).await.0, b"0\n");

    // A detached process outlives its exec (as the adapter starts an injected agentd), and the
    // tunnel reaches the container's open port.
    let serve = "mkdir -p /tmp/www && echo tunnel-ok > /tmp/www/index.html && \
                 setsid httpd -f -p 8080 -h /tmp/www </dev/null >/dev/null 2>&1 &";
    router.start("e7", &["sh", "-c", serve], None).await;
    assert_eq!(router.wait("e7").await, ExitStatus::Code(0));
    let tunnels = api::SandboxGetTunnelsRequest { sandbox_id: sandbox_id.clone(), timeout: 50.0 };
    let tunnels = control.client.sandbox_get_tunnels(control.req(tunnels)).await.unwrap().into_inner();
    assert_eq!(tunnels.result.map(|r| r.status), Some(GenericStatus::Success as i32));
    let tunnel = &tunnels.tunnels[0];
    assert_eq!((tunnel.host.as_str(), tunnel.container_port), ("127.0.0.1", 8080));
    let url = format!("http://127.0.0.1:{}/index.html", tunnel.port);
    let mut body = String::new();
    for _ in 0..50 {
        if let Ok(response) = reqwest::get(&url).await {
            body = response.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body, "tunnel-ok\n");
    fake.no_tunnels(true);
    let tunnels = api::SandboxGetTunnelsRequest { sandbox_id: sandbox_id.clone(), timeout: 50.0 };
    assert!(
        control
            .client
            .sandbox_get_tunnels(control.req(tunnels))
            .await
            .unwrap()
            .into_inner()
            .tunnels
            .is_empty()
    );

    // An injected UNAVAILABLE on a router RPC, once.
    fake.unavailable_once("TaskExecWait");
    let wait_req = tcr::TaskExecWaitRequest { task_id: task_id.clone(), exec_id: "e7".to_owned() };
    assert_eq!(
        router.client.task_exec_wait(router.req(wait_req)).await.unwrap_err().code(),
        Code::Unavailable
    );
    assert_eq!(router.wait("e7").await, ExitStatus::Code(0));

    // Revoked JWTs get UNAUTHENTICATED; a fresh one from the control plane works.
    fake.expire_router_jwts();
    let expired = router.client.task_exec_poll(router.req(poll("e7"))).await.unwrap_err();
    assert_eq!(expired.code(), Code::Unauthenticated);
    let access = api::TaskGetCommandRouterAccessRequest { task_id: task_id.clone() };
    router.jwt =
        control.client.task_get_command_router_access(control.req(access)).await.unwrap().into_inner().jwt;
    router.client.task_exec_poll(router.req(poll("e7"))).await.unwrap();

    // Terminate: the container is removed, a running exec reports SIGKILL, SandboxWait gives
    // TERMINATED, the task id poll its result; an unknown id is NOT_FOUND.
    router.start("e8", &["sleep", "300"], None).await;
    let terminate = |id: &str| api::SandboxTerminateRequest { sandbox_id: id.to_owned() };
    control.client.sandbox_terminate(control.req(terminate(&sandbox_id))).await.unwrap();
    assert_eq!(router.wait("e8").await, ExitStatus::Signal(9));
    assert!(
        agentd_fakes::containers::listed(&format!("id={container}")).is_empty(),
        "the container is still there"
    );
    let waited = control.client.sandbox_wait(control.req(wait(10.0))).await.unwrap().into_inner();
    assert_eq!(waited.result.map(|r| r.status), Some(GenericStatus::Terminated as i32));
    let ended = control.client.sandbox_get_task_id(control.req(task_poll())).await.unwrap().into_inner();
    assert_eq!(ended.task_result.map(|r| r.status), Some(GenericStatus::Terminated as i32));
    let unknown = control.client.sandbox_terminate(control.req(terminate("sb-nope"))).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let listed = control.client.sandbox_list(control.req(list(vec![tag("dev.agentd.sandbox", "1")]))).await;
    assert!(listed.unwrap().into_inner().sandboxes.is_empty(), "a terminated sandbox is listed");

    // The lifetime: past timeout_secs the sandbox ends with TIMEOUT.
    let short = control.client.sandbox_create(control.req(create(2))).await.unwrap().into_inner().sandbox_id;
    let wait_short = api::SandboxWaitRequest { sandbox_id: short.clone(), timeout: 30.0 };
    let waited = control.client.sandbox_wait(control.req(wait_short)).await.unwrap().into_inner();
    assert_eq!(waited.result.map(|r| r.status), Some(GenericStatus::Timeout as i32));
    assert_eq!(fake.container_of(&short), None);

    // Drop removes whatever is left.
    let live = control.client.sandbox_create(control.req(create(600))).await.unwrap().into_inner().sandbox_id;
    let filter = format!("label={CONTAINER_LABEL}.sandbox={live}");
    assert_eq!(agentd_fakes::containers::listed(&filter).len(), 1);
    drop(fake);
    assert!(agentd_fakes::containers::listed(&filter).is_empty(), "drop left a container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_modal_binary_prints_exports_and_serves_until_killed() {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(agentd_tests::binary("fake-modal"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed even when an assertion fails first.
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(agentd_tests::nix_pid(self.0), nix::sys::signal::Signal::SIGTERM);
        }
    }
    let kill = Kill(child.id());
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut exports = Vec::new();
    for key in ["MODAL_SERVER_URL", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"] {
        let line = lines.next().unwrap().unwrap();
        let value = line.strip_prefix(&format!("export {key}=")).unwrap_or_else(|| panic!("{line}"));
        exports.push(value.to_owned());
    }
    let (url, id, secret) = (exports[0].clone(), exports[1].clone(), exports[2].clone());
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let mut control =
        Control { client: ModalClientClient::connect(url).await.unwrap(), tokens: Tokens { id, secret } };
    let app = api::AppGetOrCreateRequest {
        app_name: "agentd".to_owned(),
        object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
        ..Default::default()
    };
    let app_id = control.client.app_get_or_create(control.req(app)).await.unwrap().into_inner().app_id;
    let unknown = api::SandboxTerminateRequest { sandbox_id: "sb-nope".to_owned() };
    assert_eq!(
        control.client.sandbox_terminate(control.req(unknown)).await.unwrap_err().code(),
        Code::NotFound
    );
    // A sandbox (a container) made through it is removed when it is killed.
    let mut sandbox_filter = None;
    if docker_available(BUSYBOX).await {
        let image = api::ImageGetOrCreateRequest {
            image: Some(api::Image {
                dockerfile_commands: vec![format!("FROM {BUSYBOX}")],
                ..Default::default()
            }),
            app_id: app_id.clone(),
            ..Default::default()
        };
        let image_id =
            control.client.image_get_or_create(control.req(image)).await.unwrap().into_inner().image_id;
        let create = api::SandboxCreateRequest {
            app_id,
            definition: Some(sandbox_definition(&image_id, 600, 8080)),
            ..Default::default()
        };
        let sandbox_id =
            control.client.sandbox_create(control.req(create)).await.unwrap().into_inner().sandbox_id;
        let filter = format!("label={CONTAINER_LABEL}.sandbox={sandbox_id}");
        assert_eq!(agentd_fakes::containers::listed(&filter).len(), 1);
        sandbox_filter = Some(filter);
    }
    let status = agentd_tests::sigterm_and_wait(&mut child, Duration::from_secs(20)).await;
    // Reaped: its pid must not be signalled again.
    std::mem::forget(kill);
    assert!(status.success(), "{status}");
    if let Some(filter) = sandbox_filter {
        assert!(agentd_fakes::containers::listed(&filter).is_empty(), "fake-modal left its container");
    }
}
