//! `DaytonaSandbox` against the fake Daytona (`agentd_fakes::fake_daytona`): real containers from
//! `agentd-base-debian` (no agentd inside, so it is injected), the REST API, the toolbox's bulk
//! multipart endpoints and exec, and the preview proxy carrying the websocket link.
//!
//! Without Docker or the images each test prints one `skipped:` line and returns
//! ([`agentd_tests::skip`]), unless `AGENTD_REQUIRE_DOCKER=1` makes that a failure.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_daytona::{FakeDaytona, IMAGE_BUILD_FAILED};
use agentd_host::adapters::daytona::{
    Channel, DaytonaConfig, DaytonaMode, DaytonaOptions, DaytonaProvider, DaytonaSandbox,
};
use agentd_host::provider::Provider as _;
use agentd_host::{BaseSandbox, SandboxError};

const DEBIAN_BASE: &str = "agentd-base-debian:latest";

fn config(fake: &FakeDaytona) -> DaytonaConfig {
    DaytonaConfig::new(fake.api_url(), fake.api_key())
}

fn options(mode: DaytonaMode) -> DaytonaOptions {
    DaytonaOptions { mode, link_timeout: Duration::from_secs(20), ..DaytonaOptions::default() }
}

/// A fake and a sandbox on it from the base image (agentd injected), or `None` (skipped).
async fn sandbox(mode: DaytonaMode) -> Option<(FakeDaytona, DaytonaSandbox)> {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return None;
    }
    let fake = FakeDaytona::start();
    let started = Instant::now();
    let sb = DaytonaSandbox::create(config(&fake), DEBIAN_BASE, &options(mode)).await.unwrap();
    eprintln!("create + inject ({mode:?}): {:?}", started.elapsed());
    Some((fake, sb))
}

#[tokio::test]
async fn injected_agentd_over_the_preview_link() {
    let Some((fake, sb)) = sandbox(DaytonaMode::Link).await else { return };
    assert_eq!(sb.channel(), Channel::Link);
    assert!(sb.agentd_command().starts_with("/tmp/agentd-"), "{}", sb.agentd_command());
    let execs = || fake.requests().iter().filter(|r| r.contains("/process/execute")).count();
    let setup = execs();
    agentd_tests::check_commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "the toolbox").await;
    // The link carried them: the toolbox exec saw only the injection's calls.
    assert_eq!(execs(), setup, "{:?}", fake.requests());
    let id = sb.id().to_owned();
    sb.close().await.unwrap();
    let gone = DaytonaSandbox::attach(config(&fake), &id, &options(DaytonaMode::Auto)).await;
    assert!(matches!(gone, Err(SandboxError::NotFound { .. })), "{:?}", gone.err());
}

#[tokio::test]
async fn toolbox_exec_fallback_runs_commands_and_derived_verbs() {
    let Some((fake, sb)) = sandbox(DaytonaMode::ToolboxExec).await else { return };
    assert_eq!(sb.channel(), Channel::ToolboxExec);
    assert!(sb.agentd().is_none());
    agentd_tests::check_commands_and_verbs(&sb).await;
    agentd_tests::check_transfers(&sb, "the toolbox").await;
    assert!(!fake.requests().iter().any(|r| r.contains("/preview-url")), "no link was asked for");
    sb.close().await.unwrap();
}

#[tokio::test]
async fn wrong_api_key_is_an_authentication_error_naming_the_variable() {
    let fake = FakeDaytona::start();
    let wrong = DaytonaConfig::new(fake.api_url(), "not-the-key");
    let err = DaytonaSandbox::create(wrong, DEBIAN_BASE, &DaytonaOptions::default()).await.err().unwrap();
    assert!(matches!(err, SandboxError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("DAYTONA_API_KEY"), "{err}");
    let provider = agentd_host::adapters::daytona::DaytonaProvider::new(
        DaytonaConfig::new(fake.api_url(), "also-wrong"),
        DaytonaOptions::default(),
    );
    let err = agentd_host::Provider::list(&provider).await.unwrap_err();
    assert!(err.to_string().contains("DAYTONA_API_KEY"), "{err}");
}

#[tokio::test]
async fn build_failed_carries_the_error_reason() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let fake = FakeDaytona::start();
    let started = Instant::now();
    let err = DaytonaSandbox::create(config(&fake), IMAGE_BUILD_FAILED, &DaytonaOptions::default())
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("build_failed"), "{text}");
    eprintln!("build_failed after {:?}: {text}", started.elapsed());
    // The errorReason is the provider's: the fake's record says what it was.
    let id = fake.sandbox_ids().pop();
    assert!(text.len() > "build_failed".len() + 40, "no reason in: {text} ({id:?})");
    // The failed sandbox is deleted before the error comes back: listed at most on its way out.
    let id = id.unwrap();
    assert!(fake.requests().contains(&format!("DELETE /api/sandbox/{id}")), "{:?}", fake.requests());
    let provider = DaytonaProvider::new(config(&fake), DaytonaOptions::default());
    let listed = provider.list().await.unwrap();
    assert!(listed.iter().all(|s| s.state == "destroying"), "left by the failed build: {listed:?}");
}

#[tokio::test]
async fn a_command_past_its_timeout_ends_with_124_on_both_channels() {
    let Some((_fake, sb)) = sandbox(DaytonaMode::ToolboxExec).await else { return };
    let started = Instant::now();
    let r = sb.execute("echo before; sleep 30", Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(r.exit_code, Some(124), "{r:?}");
    assert!(r.output.contains("timed out"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // The fallback's process group was killed: nothing sleeps on.
    let ps = "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 30' || true";
    let ps = sb.execute(ps, None).await.unwrap();
    assert_eq!(ps.output.trim(), "0", "{ps:?}");
    sb.close().await.unwrap();

    let Some((_fake, sb)) = sandbox(DaytonaMode::Link).await else { return };
    let started = Instant::now();
    let r = sb.execute("echo before; sleep 30", Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(r.exit_code, Some(124), "{r:?}");
    assert!(r.output.starts_with("before\n") && r.output.contains("timed out"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    sb.close().await.unwrap();
}

#[tokio::test]
async fn the_preview_token_is_fetched_again_after_a_restart() {
    let Some((fake, sb)) = sandbox(DaytonaMode::Link).await else { return };
    let first = sb.execute("echo $$", None).await.unwrap();
    assert_eq!(first.exit_code, Some(0));
    let id = sb.id().to_owned();
    let token_before = sb.api().preview(&id, 7700).await.unwrap().token;
    sb.api().stop(&id).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sb.api().get(&id).await.unwrap().state() != "stopped" {
        assert!(Instant::now() < deadline, "the sandbox did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sb.api().start(&id).await.unwrap();
    sb.api().wait_started(&id, Duration::from_secs(30)).await.unwrap();
    assert_ne!(sb.api().preview(&id, 7700).await.unwrap().token, token_before, "the fake rotates it");
    let previews = |fake: &FakeDaytona| fake.requests().iter().filter(|r| r.contains("/preview-url")).count();
    let before = previews(&fake);
    // The link died with the sandbox's processes: the next call restarts agentd and relinks.
    let started = Instant::now();
    let again = sb.execute("echo relinked", None).await.unwrap();
    assert_eq!((again.output.as_str(), again.exit_code), ("relinked\n", Some(0)));
    eprintln!("relinked after a restart in {:?}", started.elapsed());
    assert!(previews(&fake) > before, "the preview URL (and token) was fetched again");
    assert_eq!(sb.channel(), Channel::Link);
    sb.close().await.unwrap();
}

#[tokio::test]
async fn the_link_dropping_mid_session_heals_then_reconnects() {
    let Some((fake, sb)) = sandbox(DaytonaMode::Link).await else { return };
    let id = sb.id().to_owned();
    // The proxy cuts the connection while a command runs: the link heals through a new preview
    // connection, and the command's whole output and true exit code come back.
    let previews = |fake: &FakeDaytona| fake.requests().iter().filter(|r| r.contains("/preview-url")).count();
    let before = previews(&fake);
    let command = "echo before; sleep 2; echo after; exit 7";
    let (result, ()) = tokio::join!(sb.execute(command, Some(Duration::from_secs(25))), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        fake.drop_preview_connections(&id);
    });
    let result = result.expect("the link heals");
    assert_eq!((result.output.as_str(), result.exit_code), ("before\nafter\n", Some(7)));
    assert!(previews(&fake) > before, "the preview URL was fetched again to heal");
    let r = sb.execute("echo back", None).await.unwrap();
    assert_eq!(r.output, "back\n");

    // agentd itself killed inside the sandbox: a call that raced the close fails with `LinkClosed`
    // (it may have reached agentd, so it is not resent); the next one starts agentd again.
    let kill = sb.toolbox().execute("kill $(cat /tmp/agentd-*/pid)", None).await.unwrap();
    assert_eq!(kill.exit_code, Some(0), "{kill:?}");
    let started = Instant::now();
    let call = || tokio::time::timeout(Duration::from_secs(25), sb.execute("echo restarted", None));
    let r = match call().await.expect("a relink never hangs") {
        Err(SandboxError::LinkClosed) => call().await.expect("a relink never hangs"),
        other => other,
    };
    assert_eq!(r.unwrap().output, "restarted\n");
    eprintln!("relinked after agentd was killed in {:?}", started.elapsed());
    sb.close().await.unwrap();
}

#[tokio::test]
async fn idempotent_calls_are_retried_and_creates_are_not() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let fake = FakeDaytona::start();
    // A 5xx on create is the provider's answer, with its message; the POST is sent once.
    fake.inject_fault(Some("POST"), "/api/sandbox", 503, 1);
    let err = DaytonaSandbox::create(config(&fake), DEBIAN_BASE, &options(DaytonaMode::ToolboxExec))
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("503") && err.to_string().contains("fault injected"), "{err}");
    let posts = fake.requests().iter().filter(|r| r.starts_with("POST /api/sandbox")).count();
    assert_eq!(posts, 1);
    // 5xx on the state polls (GET) are retried with backoff: the create goes through.
    fake.inject_fault(Some("GET"), "/api/sandbox/", 502, 2);
    let sb =
        DaytonaSandbox::create(config(&fake), DEBIAN_BASE, &options(DaytonaMode::ToolboxExec)).await.unwrap();
    assert_eq!(sb.execute("echo ok", None).await.unwrap().output, "ok\n");
    // The provider lists what agentd created, with its source, and removes it.
    let provider =
        agentd_host::adapters::daytona::DaytonaProvider::new(config(&fake), options(DaytonaMode::Auto));
    let listed = agentd_host::Provider::list(&provider).await.unwrap();
    assert_eq!(
        listed.iter().map(|i| (i.id.as_str(), i.source.as_str(), i.state.as_str())).collect::<Vec<_>>(),
        [(sb.id(), DEBIAN_BASE, "started")]
    );
    agentd_host::Provider::remove(&provider, sb.id()).await.unwrap();
    let err = agentd_host::Provider::attach(&provider, sb.id()).await.err().unwrap();
    assert!(matches!(err, SandboxError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn auto_falls_back_to_the_toolbox_exec_and_link_mode_refuses_to() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let fake = FakeDaytona::start();
    // An "agentd" that never listens: no link can be made.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("agentd");
    std::fs::write(&broken, "#!/bin/sh\necho 'this agentd cannot serve' >&2\nexit 1\n").unwrap();
    let options = |mode| DaytonaOptions {
        mode,
        link_timeout: Duration::from_secs(3),
        agentd_binary: Some(broken.clone()),
        ..DaytonaOptions::default()
    };
    let started = Instant::now();
    let err =
        DaytonaSandbox::create(config(&fake), DEBIAN_BASE, &options(DaytonaMode::Link)).await.err().unwrap();
    let text = err.to_string();
    assert!(text.contains("did not answer") && text.contains("this agentd cannot serve"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    let sb = DaytonaSandbox::create(config(&fake), DEBIAN_BASE, &options(DaytonaMode::Auto)).await.unwrap();
    assert_eq!(sb.channel(), Channel::ToolboxExec);
    assert_eq!(sb.execute("echo fallback", None).await.unwrap().output, "fallback\n");
    sb.close().await.unwrap();
}

#[tokio::test]
async fn a_baked_agentd_is_used_where_the_image_has_one() {
    const DEBIAN_BAKED: &str = "agentd-debian:latest";
    if !agentd_tests::docker_available(DEBIAN_BAKED).await {
        return;
    }
    let fake = FakeDaytona::start();
    let sb = DaytonaSandbox::create(config(&fake), DEBIAN_BAKED, &options(DaytonaMode::Link)).await.unwrap();
    assert_eq!((sb.channel(), sb.agentd_command()), (Channel::Link, "/usr/local/bin/agentd"));
    // Nothing was injected: the only bulk upload is agentd's token file.
    let uploads = fake.requests().iter().filter(|r| r.contains("/files/bulk-upload")).count();
    assert_eq!(uploads, 1, "{:?}", fake.requests());
    let r = sb.execute("command -v agentd; echo $((1+2))", None).await.unwrap();
    assert_eq!(r.output, "/usr/local/bin/agentd\n3\n");
    sb.close().await.unwrap();
}

/// The link and the toolbox exec are two channels to one sandbox with one result: `read` of 2000
/// lines native over the link and derived through the toolbox exec, and `execute`. (Their timings
/// are the `daytona` benchmark's: `cargo bench -p agentd-tests --bench daytona`.)
#[tokio::test]
async fn link_and_toolbox_exec_give_the_same_results() {
    let Some((fake, sb)) = sandbox(DaytonaMode::Link).await else { return };
    let lines: String = (1..=2000).map(|i| format!("line {i} of the file\n")).collect();
    assert_eq!(
        sb.upload_files(&[("/tmp/f/2000.txt".into(), lines.into_bytes())]).await.unwrap()[0].error,
        None
    );
    // The same sandbox attached again with the toolbox exec as its only channel.
    let toolbox =
        DaytonaSandbox::attach(config(&fake), sb.id(), &options(DaytonaMode::ToolboxExec)).await.unwrap();
    assert_eq!(toolbox.channel(), Channel::ToolboxExec);
    let command = "printf 'a\\nb'; echo \"$((6*7))\"; exit 4";
    let (link, exec) =
        (sb.execute(command, None).await.unwrap(), toolbox.execute(command, None).await.unwrap());
    assert_eq!((link.output.as_str(), link.exit_code), ("a\nb42\n", Some(4)));
    assert_eq!((exec.output, exec.exit_code), (link.output, link.exit_code));
    let native = sb.read("/tmp/f/2000.txt", 0, 2000).await.unwrap();
    assert_eq!(native, toolbox.read("/tmp/f/2000.txt", 0, 2000).await.unwrap());
    assert_eq!(native.end_line, Some(2000));
    sb.close().await.unwrap();
}

#[tokio::test]
async fn attach_starts_a_stopped_sandbox_and_links_again() {
    let Some((fake, sb)) = sandbox(DaytonaMode::ToolboxExec).await else { return };
    let id = sb.id().to_owned();
    assert_eq!(sb.execute("echo kept > /root/mark", None).await.unwrap().exit_code, Some(0));
    sb.api().stop(&id).await.unwrap();
    let started = Instant::now();
    let again = DaytonaSandbox::attach(config(&fake), &id, &options(DaytonaMode::Link)).await.unwrap();
    eprintln!("attach to a stopped sandbox (start, inject, link): {:?}", started.elapsed());
    assert_eq!((again.id(), again.channel()), (id.as_str(), Channel::Link));
    assert_eq!(again.api().get(&id).await.unwrap().state(), "started");
    assert_eq!(again.execute("cat /root/mark", None).await.unwrap().output, "kept\n");
    // An attached sandbox outlives close(); its creator removes it.
    again.close().await.unwrap();
    assert_eq!(sb.execute("cat /root/mark", None).await.unwrap().output, "kept\n");
    sb.close().await.unwrap();
    let unknown = DaytonaSandbox::attach(config(&fake), "no-such-sandbox", &options(DaytonaMode::Auto)).await;
    assert!(matches!(unknown, Err(SandboxError::NotFound { .. })), "{:?}", unknown.err());
}
