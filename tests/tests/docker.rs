//! Containers on the real Docker engine: agentd baked into `agentd-busybox` / `agentd-debian` (built by
//! `images/build.sh`), and injected into a running container from a base image without it. (The file
//! verbs run the whole conformance suite on the same four sandboxes: `conformance.rs`.)
//!
//! Without a reachable engine (or without the images) each test prints one `skipped:` line and returns
//! ([`agentd_tests::skip`]), unless
//! `AGENTD_REQUIRE_DOCKER=1` (set by `.ci/run`) makes that a failure.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_host::AgentdSource;
use agentd_host::BaseSandbox;
use agentd_host::adapters::docker::{self, DockerSandbox};
use agentd_host::provider::{self, SandboxSpec};
use agentd_protocol::ExecRequest;
use sha2::{Digest as _, Sha256};

const BUSYBOX: &str = "agentd-busybox:latest";
const DEBIAN: &str = "agentd-debian:latest";
const BUSYBOX_BASE: &str = "agentd-base-busybox:latest";
const DEBIAN_BASE: &str = "agentd-base-debian:latest";

async fn transfers(sb: &DockerSandbox) {
    let mut data = vec![0u8; 100 << 20];
    rand::Fill::fill(&mut data[..], &mut rand::rng());
    let digest = format!("{:x}", Sha256::digest(&data));
    // Through the archive API (the adapter's own channel).
    let up = sb.upload_files(&[("/tmp/big/archive.bin".into(), data.clone())]).await.unwrap();
    assert_eq!(up[0].error, None);
    let down = sb.download_files(&["/tmp/big/archive.bin".into()]).await.unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(down[0].content.as_ref().unwrap())), digest);
    // Through the link.
    let link = sb.agentd().link().await.unwrap();
    assert_eq!(link.upload("/tmp/big/link.bin", data.as_slice(), |_| {}).await.unwrap(), None);
    let mut back = Vec::new();
    let done = link.download("/tmp/big/link.bin", &mut back, |_, _| {}).await.unwrap().unwrap();
    assert_eq!(
        (done.sha256.as_str(), format!("{:x}", Sha256::digest(&back))),
        (digest.as_str(), digest.clone())
    );
    agentd_tests::check_per_file_codes(sb).await;
}

#[tokio::test]
async fn baked_busybox_runs_commands_transfers_and_verbs() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let sb = DockerSandbox::create(BUSYBOX).await.unwrap();
    // Removed even when an assertion fails (close() below removes it on success).
    let _remove = agentd_tests::RemoveOnDrop(sb.container().to_owned());
    let r = sb.execute("printf a; printf b >&2; exit 3", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("ab", Some(3)));
    transfers(&sb).await;
    let id = sb.container().to_owned();
    sb.close().await.unwrap();
    let engine = docker::engine().await.unwrap();
    assert!(
        engine
            .inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn agentd_as_pid_1_reaps_orphans_keeps_exit_codes_and_stops_fast() {
    if !agentd_tests::docker_available(BUSYBOX).await {
        return;
    }
    let sb = DockerSandbox::create(BUSYBOX).await.unwrap();
    // Removed even when an assertion fails (close() below removes it on success).
    let _remove = agentd_tests::RemoveOnDrop(sb.container().to_owned());
    // 50 orphans that exit quickly, while other execs run and report their own codes.
    let orphans =
        sb.execute("for i in $(seq 50); do (sleep 0.2 &) ; done; echo spawned", None).await.unwrap();
    assert_eq!(orphans.output, "spawned\n");
    let link = sb.agentd();
    let codes = futures_util::future::join_all((0..20).map(|i| async move {
        let request =
            ExecRequest { command: format!("sleep 0.{}; exit {i}", i % 5), ..ExecRequest::default() };
        (i, link.exec(request, None).await.unwrap().exit_code)
    }))
    .await;
    for (i, code) in codes {
        assert_eq!(code, i);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let zombies = sb
        .execute("for s in /proc/[0-9]*/stat; do cut -d' ' -f3 $s; done | grep -c Z || true", None)
        .await
        .unwrap();
    assert_eq!(zombies.output.trim(), "0", "zombies left in the container");
    // A timeout kills the whole tree inside the container too.
    let start = Instant::now();
    let r = link
        .exec(
            ExecRequest {
                command: "sh -c 'sleep 100 & setsid sleep 100 & sleep 100'".into(),
                timeout: Some(0.5),
                ..ExecRequest::default()
            },
            None,
        )
        .await
        .unwrap();
    assert!(r.ending.timed_out && start.elapsed() < Duration::from_secs(4));
    let left = sb.execute("ps | grep -c '[s]leep 100' || true", None).await.unwrap();
    assert_eq!(left.output.trim(), "0");
    // `docker stop` (SIGTERM to PID 1) ends it at once, not after the 10 s SIGKILL grace.
    let _running = sb.execute("sleep 300 > /dev/null 2>&1 &", None).await.unwrap();
    let start = Instant::now();
    let out = std::process::Command::new("docker").args(["stop", sb.container()]).output().unwrap();
    assert!(out.status.success());
    assert!(start.elapsed() < Duration::from_secs(3), "docker stop took {:?}", start.elapsed());
    sb.close().await.unwrap();
}

/// A process whose first thread ends alone (the `exit` system call, not `exit_group`) reads as a
/// zombie in `/proc/<pid>/stat` while its other threads run on, and fork. In a container agentd
/// has no cgroups to kill through, so its process scan must still count it live: a timeout ends
/// it, and the child its thread started.
#[tokio::test]
async fn a_timeout_ends_a_process_whose_first_thread_exited_alone() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let container = agentd_tests::plain_container(DEBIAN_BASE, &[]);
    let _remove = agentd_tests::RemoveOnDrop(container.clone());
    let sb = DockerSandbox::attach(&container, &agentd_tests::static_agentd()).await.unwrap();
    // argv[1]: how long the thread, and the child it forks, live on.
    let half = r#"import ctypes, os, sys, threading, time
def work():
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", sys.argv[1]])
    time.sleep(float(sys.argv[1]))
threading.Thread(target=work).start()
time.sleep(0.3)
ctypes.CDLL(None).syscall(60, 0)
"#;
    // `comm:state-of-the-first-thread` of each process with a live thread that is one of these.
    let census = r#"for p in /proc/[0-9]*; do
    states=$(cat $p/task/*/stat 2>/dev/null | sed 's/.*) //' | cut -d' ' -f1)
    [ -n "$states" ] && echo "$states" | grep -qv Z || continue
    case "$(cat $p/comm 2>/dev/null) $(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
        python3*|"sleep sleep 3 "|"sleep sleep 101 ") echo "$(cat $p/comm):$(sed 's/.*) //' $p/stat | cut -d' ' -f1)" ;;
    esac
done | sort | tr '\n' ' '
"#;
    let files = [("/tmp/half.py", half), ("/tmp/census.sh", census)];
    let files: Vec<(String, Vec<u8>)> =
        files.iter().map(|(p, c)| ((*p).to_owned(), c.as_bytes().to_vec())).collect();
    sb.upload_files(&files).await.unwrap();
    let link = sb.agentd();
    let run = |command: &str, timeout: f64| {
        let request =
            ExecRequest { command: command.to_owned(), timeout: Some(timeout), ..ExecRequest::default() };
        async move { link.exec(request, None).await.unwrap() }
    };
    // The trick works here: the first thread is a zombie, the rest runs on and has forked.
    let seen = run("python3 /tmp/half.py 3 & sleep 1.5; sh /tmp/census.sh", 20.0).await;
    assert_eq!(seen.output.as_deref().map(str::trim), Some("python3:Z sleep:S"), "{seen:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ended = run("sh /tmp/census.sh", 20.0).await;
    assert_eq!(ended.output.as_deref().map(str::trim), Some(""), "the demonstration ended: {ended:?}");
    // In a session of its own: no process group kill reaches it, the scan has to find it.
    let r = run("setsid python3 /tmp/half.py 101 & sleep 100", 1.0).await;
    assert!(r.ending.timed_out, "{r:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = run("sh /tmp/census.sh", 20.0).await;
    assert_eq!(left.output.as_deref().map(str::trim), Some(""), "outlived the timeout: {left:?}");
    sb.close().await.unwrap();
}

#[tokio::test]
async fn injected_into_a_busybox_container_without_agentd() {
    if !agentd_tests::docker_available(BUSYBOX_BASE).await {
        return;
    }
    let container = agentd_tests::plain_container(BUSYBOX_BASE, &[]);
    let _remove = agentd_tests::RemoveOnDrop(container.clone());
    let sb = DockerSandbox::attach(&container, &agentd_tests::static_agentd()).await.unwrap();
    let r = sb.execute("echo injected; exit 4", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("injected\n", Some(4)));
    transfers(&sb).await;
}

#[tokio::test]
async fn debian_baked_and_injected() {
    if !agentd_tests::docker_available(DEBIAN).await || !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let sb = DockerSandbox::create(DEBIAN).await.unwrap();
    let _remove = agentd_tests::RemoveOnDrop(sb.container().to_owned());
    assert_eq!(sb.agentd_source(), Some(AgentdSource::Baked));
    // `python` too: test suites and scripts call it by that name.
    let r = sb.execute("python3 -c 'print(6*7)'; python -c 'print(1)'", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("42\n1\n", Some(0)));
    sb.close().await.unwrap();
    let container = agentd_tests::plain_container(DEBIAN_BASE, &[]);
    let _remove = agentd_tests::RemoveOnDrop(container.clone());
    let sb = DockerSandbox::attach(&container, &agentd_tests::static_agentd()).await.unwrap();
    assert_eq!(sb.agentd_source(), Some(AgentdSource::Injected));
    let r = sb.execute("python3 -c 'print(6*7)'; python -c 'print(1)'; exit 5", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("42\n1\n", Some(5)));
}

/// `docker:IMAGE` of an image without agentd (its entrypoint is not agentd): the static agentd is
/// copied in before start and runs as PID 1, and the sandbox says it was injected.
#[tokio::test]
async fn created_from_an_image_without_agentd_gets_it_injected() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let spec: SandboxSpec = format!("docker:{DEBIAN_BASE}").parse().unwrap();
    let opened = provider::open(&spec).await.unwrap();
    let _remove = agentd_tests::RemoveOnDrop(opened.sandbox.id().to_owned());
    assert_eq!(opened.sandbox.agentd_source(), Some(AgentdSource::Injected));
    let r =
        opened.sandbox.execute("echo ok; cat /proc/1/cmdline | tr '\\0' ' '; exit 3", None).await.unwrap();
    assert_eq!(
        (r.output.as_str(), r.exit_code),
        ("ok\n/tmp/.agentd/agentd serve --listen 0.0.0.0:7700 --token-file /run/agentd/token ", Some(3))
    );
    agentd_tests::check_commands_and_verbs(opened.sandbox.as_ref()).await;
    let id = opened.sandbox.id().to_owned();
    opened.close().await.unwrap();
    let engine = docker::engine().await.unwrap();
    let gone =
        engine.inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>).await;
    assert!(gone.is_err(), "the container is removed on close");
}
