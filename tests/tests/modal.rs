//! `ModalSandbox` against the fake Modal (`agentd_fakes::fake_modal`): real containers from
//! `agentd-base-debian` (no agentd inside, so it is injected through the router exec), the control
//! plane's create sequence, the command router's execs (stdio streams, stdin streams, waits), and
//! the tunnel carrying the websocket link.
//!
//! Without Docker or the images each test prints one `skipped:` line and returns
//! ([`agentd_tests::skip`]), unless `AGENTD_REQUIRE_DOCKER=1` makes that a failure. Every sandbox
//! is terminated by a guard, and the fake removes its containers when dropped, failed test or not.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_modal::FakeModal;
use agentd_host::adapters::modal::{
    Channel, Control, ModalConfig, ModalMode, ModalOptions, ModalProvider, ModalSandbox,
};
use agentd_host::{BaseSandbox, Provider, SandboxError};
use tonic::Code;

const DEBIAN_BASE: &str = "agentd-base-debian:latest";

fn config(fake: &FakeModal) -> ModalConfig {
    ModalConfig::new(fake.server_url(), fake.token_id(), fake.token_secret())
}

fn options(mode: ModalMode) -> ModalOptions {
    ModalOptions {
        mode,
        link_timeout: Duration::from_secs(20),
        lifetime: Duration::from_secs(900),
        ..ModalOptions::default()
    }
}

/// Terminates a sandbox when the test ends, passed or failed. The call runs on the fake's own
/// runtime with a client made there: the test's runtime may be the one unwinding.
struct Terminate<'a> {
    fake: &'a FakeModal,
    id: String,
}

impl Drop for Terminate<'_> {
    fn drop(&mut self) {
        let config = config(self.fake);
        let id = std::mem::take(&mut self.id);
        let fake = self.fake;
        // From a thread of its own: blocking on a runtime is refused inside the test's runtime.
        std::thread::scope(|scope| {
            scope.spawn(|| fake.block_on(async move { Control::new(config)?.terminate(&id).await }));
        });
    }
}

/// A sandbox from the base image (agentd injected), or `None` (skipped).
async fn sandbox(fake: &FakeModal, mode: ModalMode) -> Option<(ModalSandbox, Terminate<'_>)> {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return None;
    }
    let started = Instant::now();
    let sb = ModalSandbox::create(config(fake), DEBIAN_BASE, &options(mode)).await.unwrap();
    eprintln!("create + inject ({mode:?}): {:?}", started.elapsed());
    let guard = Terminate { fake, id: sb.id().to_owned() };
    Some((sb, guard))
}

fn count(fake: &FakeModal, rpc: &str) -> usize {
    fake.calls().iter().filter(|c| c.rpc == rpc).count()
}

/// The shared checks of `execute`, the verbs and the offload, and what else the router exec must
/// get right: a command reading stdin sees its end, glob and delete.
async fn commands_and_verbs(sb: &ModalSandbox) {
    let started = Instant::now();
    agentd_tests::check_commands_and_verbs(sb).await;
    assert_eq!(sb.execute("cat; echo done", Some(Duration::from_secs(20))).await.unwrap().output, "done\n");
    let glob = sb.glob("*.txt", Some("/tmp/verbs")).await.unwrap();
    assert_eq!(glob.matches.unwrap().len(), 3);
    let d = sb.delete("/tmp/verbs/a.txt").await.unwrap();
    assert_eq!(d.path.as_deref(), Some("/tmp/verbs/a.txt"));
    eprintln!("commands and verbs over {:?}: {:?}", sb.channel(), started.elapsed());
}

/// (a) Injected agentd over the tunnel: commands, verbs and offload over the link (the router saw
/// no exec for them), files through the router exec, terminated on close.
#[tokio::test]
async fn injected_agentd_over_the_tunnel_link() {
    let fake = FakeModal::start();
    let Some((sb, _guard)) = sandbox(&fake, ModalMode::Link).await else { return };
    assert_eq!(sb.channel(), Channel::Link);
    assert_eq!(sb.agentd_command(), "/tmp/.agentd/agentd");
    let create = fake.calls().into_iter().find(|c| c.rpc == "SandboxCreate").unwrap();
    assert_eq!((create.code, create.attempt), (Code::Ok, Some(0)));
    let setup = count(&fake, "TaskExecStart");
    let r = sb.execute("echo $((6*7)); echo err >&2", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("42\nerr\n", Some(0)));
    let w = sb.write("/tmp/link/a.txt", "linked\n").await.unwrap();
    assert_eq!(w.error, None);
    assert_eq!(sb.read("/tmp/link/a.txt", 0, 10).await.unwrap().file_data.unwrap().content, "linked");
    assert_eq!(count(&fake, "TaskExecStart"), setup, "execute and the verbs went over the link");
    commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "the router exec").await;
    let id = sb.id().to_owned();
    assert!(fake.container_of(&id).is_some());
    sb.close().await.unwrap();
    assert_eq!(fake.container_of(&id), None, "terminated");
    let gone = ModalSandbox::attach(config(&fake), &id, &options(ModalMode::Auto)).await;
    assert!(gone.is_err(), "attached to a terminated sandbox");
}

/// (b) The router exec as the only channel: `execute` as `sh -c`, the verbs derived (`agentd fs`
/// through it), files through it; no tunnel asked for. `Auto` without tunnels falls back to it.
#[tokio::test]
async fn router_exec_runs_commands_and_derived_verbs() {
    let fake = FakeModal::start();
    let Some((sb, _guard)) = sandbox(&fake, ModalMode::RouterExec).await else { return };
    assert_eq!(sb.channel(), Channel::RouterExec);
    assert!(sb.agentd().is_none());
    let started = Instant::now();
    assert_eq!(sb.execute("true", None).await.unwrap().exit_code, Some(0));
    eprintln!("execute(\"true\") through the router: {:?}", started.elapsed());
    commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "the router exec").await;
    assert_eq!(count(&fake, "SandboxGetTunnels"), 0, "no link was asked for");
    let started = Instant::now();
    sb.close().await.unwrap();
    eprintln!("close: {:?}", started.elapsed());

    fake.no_tunnels(true);
    let auto = ModalSandbox::create(config(&fake), DEBIAN_BASE, &options(ModalMode::Auto)).await.unwrap();
    let _auto_guard = Terminate { fake: &fake, id: auto.id().to_owned() };
    assert_eq!(auto.channel(), Channel::RouterExec);
    assert_eq!(auto.execute("echo fallback", None).await.unwrap().output, "fallback\n");
    eprintln!("auto: {:?}", started.elapsed());
    let err =
        ModalSandbox::create(config(&fake), DEBIAN_BASE, &options(ModalMode::Link)).await.err().unwrap();
    assert!(err.to_string().contains("no tunnel for port 7700"), "{err}");
}

/// (c) A stdio stream cut mid-output is reopened at the byte offset received: the output of a
/// command printing numbered lines comes back whole, nothing lost or doubled.
#[tokio::test]
async fn a_cut_stdio_stream_resumes_at_its_offset() {
    let fake = FakeModal::start();
    let Some((sb, _guard)) = sandbox(&fake, ModalMode::RouterExec).await else { return };
    let expected: String = (1..=200_000).map(|i| format!("line {i}\n")).collect();
    // Cut somewhere inside a line, far from a message boundary.
    fake.cut_stdio_after(123_457);
    let reads = count(&fake, "TaskExecStdioRead");
    let r =
        sb.execute("i=1; while [ $i -le 200000 ]; do echo line $i; i=$((i+1)); done", None).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output == expected, "{} bytes back, {} expected", r.output.len(), expected.len());
    // stdout, stderr, and stdout reopened at its offset (a stream's record keeps its opening status).
    assert_eq!(count(&fake, "TaskExecStdioRead") - reads, 3, "{:?}", fake.calls());
    // The same for a download.
    let file: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(sb.upload_files(&[("/tmp/cut.bin".into(), file.clone())]).await.unwrap()[0].error, None);
    fake.cut_stdio_after(1_000_001);
    let reads = count(&fake, "TaskExecStdioRead");
    let down = sb.download_files(&["/tmp/cut.bin".into()]).await.unwrap();
    assert!(down[0].content.as_deref() == Some(&file[..]), "{:?}", down[0].error);
    assert_eq!(count(&fake, "TaskExecStdioRead") - reads, 3);
}

/// (c) An expired router JWT is refreshed: the next exec gets `UNAUTHENTICATED`, fetches access
/// again and succeeds, over both stdin-carrying and plain execs.
#[tokio::test]
async fn an_expired_router_jwt_is_refreshed() {
    let fake = FakeModal::start();
    let Some((sb, _guard)) = sandbox(&fake, ModalMode::RouterExec).await else { return };
    assert_eq!(sb.execute("echo one", None).await.unwrap().output, "one\n");
    let accesses = count(&fake, "TaskGetCommandRouterAccess");
    fake.expire_router_jwts();
    assert_eq!(sb.execute("echo two", None).await.unwrap().output, "two\n");
    assert_eq!(count(&fake, "TaskGetCommandRouterAccess"), accesses + 1);
    let refused = fake.calls().iter().filter(|c| c.code == Code::Unauthenticated).count();
    assert!(refused >= 1, "{:?}", fake.calls());
    fake.expire_router_jwts();
    let up = sb.upload_files(&[("/tmp/jwt/f".into(), b"after refresh".to_vec())]).await.unwrap();
    assert_eq!(up[0].error, None);
    let down = sb.download_files(&["/tmp/jwt/f".into()]).await.unwrap();
    assert_eq!(down[0].content.as_deref(), Some(&b"after refresh"[..]));
    assert_eq!(count(&fake, "TaskGetCommandRouterAccess"), accesses + 2);
}

/// (c) A transient `UNAVAILABLE` on a unary call is retried with the same idempotency key and
/// the next attempt number, on the control plane and the router; a refused stdin stream resumes
/// from `TaskExecStdinStatus`.
#[tokio::test]
async fn a_transient_unavailable_is_retried_with_the_same_key() {
    let fake = FakeModal::start();
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    fake.unavailable_once("SandboxCreate");
    let sb = ModalSandbox::create(config(&fake), DEBIAN_BASE, &options(ModalMode::RouterExec)).await.unwrap();
    let _guard = Terminate { fake: &fake, id: sb.id().to_owned() };
    let creates: Vec<_> = fake.calls().into_iter().filter(|c| c.rpc == "SandboxCreate").collect();
    assert_eq!(creates.len(), 2, "{creates:?}");
    assert_eq!((creates[0].code, creates[0].attempt), (Code::Unavailable, Some(0)));
    assert_eq!((creates[1].code, creates[1].attempt), (Code::Ok, Some(1)));
    assert!(creates[0].idempotency_key.is_some());
    assert_eq!(creates[0].idempotency_key, creates[1].idempotency_key);
    assert_eq!(fake.sandbox_ids().len(), 1, "one sandbox for one logical create");
    // Every other unary call got a key of its own.
    let apps: Vec<_> = fake.calls().into_iter().filter(|c| c.rpc == "AppGetOrCreate").collect();
    assert_ne!(apps[0].idempotency_key, creates[0].idempotency_key);
    fake.unavailable_once("TaskExecStart");
    fake.unavailable_once("TaskExecWait");
    assert_eq!(sb.execute("echo retried", None).await.unwrap().output, "retried\n");
    let starts =
        fake.calls().iter().filter(|c| c.rpc == "TaskExecStart" && c.code == Code::Unavailable).count();
    assert_eq!(starts, 1);
    // A stdin stream refused once resumes from what the router says it holds.
    fake.unavailable_once("TaskExecStdinWriteStream");
    let bytes: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    let up = sb.upload_files(&[("/tmp/resumed/f".into(), bytes.clone())]).await.unwrap();
    assert_eq!(up[0].error, None);
    assert_eq!(count(&fake, "TaskExecStdinStatus"), 1);
    let down = sb.download_files(&["/tmp/resumed/f".into()]).await.unwrap();
    assert!(down[0].content.as_deref() == Some(&bytes[..]));
}

/// (c) A wrong token is an authentication error naming both variables, for create and list.
#[tokio::test]
async fn a_bad_token_is_an_authentication_error_naming_the_variables() {
    let fake = FakeModal::start();
    let wrong = ModalConfig::new(fake.server_url(), fake.token_id(), "as-wrong");
    let err = ModalSandbox::create(wrong.clone(), DEBIAN_BASE, &ModalOptions::default()).await.err().unwrap();
    assert!(matches!(err, SandboxError::Auth { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("MODAL_TOKEN_ID") && text.contains("MODAL_TOKEN_SECRET"), "{text}");
    let provider = ModalProvider::new(wrong, ModalOptions::default());
    let err = provider.list().await.unwrap_err().to_string();
    assert!(err.contains("MODAL_TOKEN_ID") && err.contains("MODAL_TOKEN_SECRET"), "{err}");
    assert!(fake.sandbox_ids().is_empty());
}

/// (d) A command past its timeout ends with 124 and the note, on the router exec and on the link.
#[tokio::test]
async fn a_command_past_its_timeout_ends_with_124_on_both_channels() {
    let fake = FakeModal::start();
    for mode in [ModalMode::RouterExec, ModalMode::Link] {
        let Some((sb, _guard)) = sandbox(&fake, mode).await else { return };
        let started = Instant::now();
        let r = sb.execute("echo before; sleep 30", Some(Duration::from_secs(1))).await.unwrap();
        assert_eq!(r.exit_code, Some(124), "{mode:?}: {r:?}");
        assert!(r.output.starts_with("before\n") && r.output.contains("timed out"), "{mode:?}: {r:?}");
        assert!(started.elapsed() < Duration::from_secs(15), "{mode:?}: {:?}", started.elapsed());
        // The command's process tree is gone, and the sandbox still answers.
        let ps = "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 30' || true";
        let ps = sb.execute(ps, None).await.unwrap();
        assert_eq!(ps.output.trim(), "0", "{mode:?}: {ps:?}");
        assert_eq!(sb.execute("echo after", None).await.unwrap().output, "after\n");
        sb.close().await.unwrap();
    }
}

/// The provider lists agentd's sandboxes by tag, with their source, attaches to one (reusing the
/// agentd that runs there) and removes it.
#[tokio::test]
async fn the_provider_lists_attaches_and_removes_by_tag() {
    let fake = FakeModal::start();
    let Some((sb, _guard)) = sandbox(&fake, ModalMode::Link).await else { return };
    assert_eq!(sb.execute("echo kept > /tmp/mark", None).await.unwrap().exit_code, Some(0));
    let provider = ModalProvider::new(config(&fake), options(ModalMode::Link));
    let listed = provider.list().await.unwrap();
    assert_eq!(
        listed.iter().map(|i| (i.id.as_str(), i.source.as_str(), i.state.as_str())).collect::<Vec<_>>(),
        [(sb.id(), DEBIAN_BASE, "running")]
    );
    let attached = provider.attach(sb.id()).await.unwrap();
    assert_eq!(attached.execute("cat /tmp/mark", None).await.unwrap().output, "kept\n");
    // One agentd serves both handles: the attach read its token instead of starting another.
    let ps = "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline; echo; done 2>/dev/null | grep -c '^/tmp/.agentd/agentd serve'";
    let agentds = sb.execute(ps, None).await.unwrap();
    assert_eq!(agentds.output.trim(), "1", "{agentds:?}");
    drop(attached);
    provider.remove(sb.id()).await.unwrap();
    assert!(provider.list().await.unwrap().is_empty());
    let unknown = provider.attach("sb-nosuchsandbox").await.err().unwrap();
    assert!(matches!(unknown, SandboxError::NotFound { .. }), "{unknown:?}");
    // Not of Modal's shape (`sb-` + letters and digits): refused before any call.
    let malformed = provider.attach("sb-no-such-sandbox").await.err().unwrap();
    assert!(matches!(malformed, SandboxError::BadId { .. }), "{malformed:?}");
}
